module agent-watchdog/bench/loadgen

go 1.19
