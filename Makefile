# The two commands of the README: `make run` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# installs go through uv (it comes into .venv first, with the venv's own pip)
UV_PIP := $(VENV)/bin/uv pip install -q
DIST_VENV := .venvs/dist
DIST_PY   := $(DIST_VENV)/bin/python

.PHONY: run demo test check lint bench deps-test system-deps frameworks clean dist dist-python \
	dist-image dist-chart collector loadgen goagent genkit-go fantasy-agent langchaingo-agent eino-agent rust-agent rig-agent langchain-rust-agent java-agent \
	spring-ai-agent koog-agent

$(VENV)/.created:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q 'uv>=0.5'
	$(UV_PIP) --python $(PY) --upgrade pip
	touch $@

# The compiled parts (native/, Rust through PyO3: the OTLP decode and the model endpoint's relay)
# are built by the install, in place, where cargo is found (else the sidecar is pure Python and
# says so at start). Cargo's builds and cargo-fuzz are the user's cache, as Go's and uv's are
# (AGENT_WATCHDOG_CACHE, default ~/.cache/agent-watchdog): a new clone on a machine that built the
# same native/ before compiles nothing, one with other sources only the workspace's crates
# (tools/native-target.sh: a cargo target directory per content of native/); tests/test_native_fuzz.py
# reads the same place
export AGENT_WATCHDOG_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/agent-watchdog
export CARGO_TARGET_DIR := $(AGENT_WATCHDOG_CACHE)/cargo-target
NATIVE := sh tools/native-target.sh
# the extensions an editable install builds in place: removed before it, so a compile that fails
# (they are optional, for machines without cargo) leaves no older build to run; where cargo is
# found, an install that made none of them is an error, not a silent pure-Python sidecar
NATIVE_SO := watchdog/core/spans/_native watchdog/shell/model/_relay
NATIVE_FRESH := for so in $(NATIVE_SO); do rm -f $$so.*.so; done
NATIVE_MADE = ! command -v cargo >/dev/null || for so in $(NATIVE_SO); do ls $$so.*.so >/dev/null \
	2>&1 || { echo "error: cargo is installed but $$so did not compile (see above)" >&2; \
	rm -f $@; exit 1; }; done
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(wildcard native/*/Cargo.toml native/*/src/*.rs)

## cargo-fuzz, for the Rust decoder's fuzz run (tests/test_native_fuzz.py), from crates.io
CARGO_FUZZ := $(AGENT_WATCHDOG_CACHE)/cargo/bin/cargo-fuzz
$(CARGO_FUZZ):
	cargo install --quiet --locked --root $(AGENT_WATCHDOG_CACHE)/cargo cargo-fuzz@0.13.2

$(VENV)/.installed: $(VENV)/.created pyproject.toml $(NATIVE_SOURCES)
	$(NATIVE_FRESH)
	$(NATIVE) $(UV_PIP) --python $(PY) -e .
	$(NATIVE_MADE)
	touch $@

# the tests drive both distributions: the sidecar and the agent-side client (client/); the
# client's editable install builds its C span path in place, the sidecar's its compiled parts
# (each rebuilt when its source changes)
$(VENV)/.installed-test: $(VENV)/.created pyproject.toml client/pyproject.toml client/setup.py \
		client/agent_watchdog_client/_spanpath.c $(NATIVE_SOURCES)
	$(NATIVE_FRESH)
	$(NATIVE) $(UV_PIP) --python $(PY) -e '.[test]' -e ./client
	$(NATIVE_MADE)
	touch $@ $(VENV)/.installed

## run: set up .venv and start the sidecar on the shipped defaults (its state in ./state)
run: $(VENV)/.installed
	$(VENV)/bin/watchdog serve

## demo: an embedded sidecar and three simulated agents, watched live (about 20 s)
demo: $(VENV)/.installed
	$(VENV)/bin/watchdog demo

## system-deps: Debian packages the tests use, when missing: a real Prometheus and promtool;
## buildah, podman, runc and debootstrap to build and run the container image (make dist,
## tests/test_image.py);
## gcc and the Python headers to build the client's C span path (tests/test_client_span_path.py);
## Go for the model endpoint bench's client and upstream (bench/loadgen, standard library only);
## a JDK and Maven for the model endpoint's Java agents (tests/frameworks/java); curl, an HTTP/2
## client with prior knowledge (tests/test_model_proxy.py)
SYSTEM_DEPS := prometheus:prometheus promtool:prometheus buildah:buildah podman:podman \
	runc:runc debootstrap:debootstrap gcc:gcc go:golang-go javac:openjdk-17-jdk-headless \
	mvn:maven curl:curl
HAS_PYTHON_H := import os, sys, sysconfig; \
	sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))
system-deps:
	@missing=""; for dep in $(SYSTEM_DEPS); do \
		command -v $${dep%%:*} >/dev/null 2>&1 || [ -x /usr/sbin/$${dep%%:*} ] \
			|| missing="$$missing $${dep#*:}"; \
	done; \
	$(PYTHON) -c '$(HAS_PYTHON_H)' || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
		missing=$$(echo $$missing | tr ' ' '\n' | sort -u | tr '\n' ' '); \
		echo "installing Debian packages: $$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

## frameworks: one venv per real agent framework the tests drive (.venvs/NAME from
## tests/frameworks/envs/NAME.txt; frameworks pin clashing dependencies), made with uv,
## FRAMEWORK_JOBS at once. The venvs are the user's cache (AGENT_WATCHDOG_CACHE/venvs/NAME-HASH,
## HASH that of the list and the Python; .venvs/NAME links there): a venv is made once per
## content of its list, and a new clone finds it made, with the bytecode the tests' driver
## processes compiled into it (one unused for a week goes when another of its name is made)
FRAMEWORK_ENVS  := $(wildcard tests/frameworks/envs/*.txt)
FRAMEWORK_VENVS := $(patsubst tests/frameworks/envs/%.txt,.venvs/%/.installed,$(FRAMEWORK_ENVS))
FRAMEWORK_JOBS  ?= 4
FRAMEWORK_CACHE := $(AGENT_WATCHDOG_CACHE)/venvs
export UV_PYTHON_DOWNLOADS := never

.venvs/%/.installed: tests/frameworks/envs/%.txt $(VENV)/.created
	@mkdir -p .venvs $(FRAMEWORK_CACHE)
	@key=$$( { cat $<; $(PYTHON) -c 'import sys; print(sys.version, sys.executable)'; } \
		| sha256sum | cut -c1-16); cached=$(FRAMEWORK_CACHE)/$*-$$key; \
	exec 9>$$cached.lock; flock 9; \
	if [ ! -f $$cached/.installed ]; then \
		echo "making the venv $$cached"; rm -rf $$cached; \
		$(VENV)/bin/uv venv -q --python $(PYTHON) $$cached \
		&& $(UV_PIP) --python $$cached/bin/python -r $< && touch $$cached/.installed || exit 1; \
		find $(FRAMEWORK_CACHE) -mindepth 2 -maxdepth 2 -name .installed -mtime +7 \
			-path '$(FRAMEWORK_CACHE)/$*-????????????????/*' | while read -r old; do \
			rm -rf "$${old%/.installed}" "$${old%/.installed}.lock"; done; \
	fi; \
	rm -rf .venvs/$* && ln -s $$cached .venvs/$*
	touch $@

frameworks: $(VENV)/.created
	$(MAKE) --no-print-directory -j$(FRAMEWORK_JOBS) $(FRAMEWORK_VENVS)

## the TypeScript agents of the model endpoint's, the Vercel AI SDK's and LangGraph.js' tests
## (tests/frameworks/ts: the openai npm package, the AI SDK and its OpenAI and Anthropic
## providers, the OpenAI Agents SDK, LangGraph.js with @langchain/openai and OpenInference's
## LangChain.js instrumentation, the OpenTelemetry Node SDK and tsx), exactly as locked, from
## the npm registry
TS_AGENT := tests/frameworks/ts/node_modules/.installed
## ... and Genkit's agent (tests/frameworks/ts/genkit: Genkit pins OpenTelemetry JS 1.x), without
## its optional Firebase and Google Cloud plugins; it takes tsx from the one above
TS_GENKIT := tests/frameworks/ts/genkit/node_modules/.installed
## ... and Mastra's agent (tests/frameworks/ts/mastra: Mastra brings its own OpenTelemetry JS and
## AI SDK versions), its traces exported by @mastra/otel-exporter; it takes tsx from the first
TS_MASTRA := tests/frameworks/ts/mastra/node_modules/.installed
## ... and the LangGraph.js agent traced by OpenLLMetry's Node SDK (tests/frameworks/ts/traceloop:
## @traceloop/node-server-sdk brings its own OpenTelemetry JS and instrumentations); it takes
## tsx from the first
TS_TRACELOOP := tests/frameworks/ts/traceloop/node_modules/.installed
## ... and VoltAgent's agents (tests/frameworks/ts/voltagent: @voltagent/core brings its own
## OpenTelemetry JS and AI SDK versions), traced by its own VoltAgentObservability; they take
## tsx from the first. Cold npm cache: about 45 s
TS_VOLTAGENT := tests/frameworks/ts/voltagent/node_modules/.installed

## ... and LlamaIndex.TS's agents (tests/frameworks/ts/llamaindex: npm llamaindex, its
## @llamaindex/workflow and @llamaindex/openai, one copy of @llamaindex/core by the lock's
## overrides; OpenLLMetry's @traceloop/instrumentation-llamaindex); they take tsx and the OTLP
## exporter from the first. Cold npm cache: about 9 s, a 40 MB download, 89 MB on disk
TS_LLAMAINDEX := tests/frameworks/ts/llamaindex/node_modules/.installed

## ... and Strands Agents for TypeScript (tests/frameworks/ts/strands: @strands-agents/sdk, which asks
## for openai 6.x and the OpenTelemetry JS 0.219.x OTLP exporters as peers); it takes tsx from the
## first. Cold npm cache: about 20 s, a 50 MB download, 126 MB on disk
TS_STRANDS := tests/frameworks/ts/strands/node_modules/.installed

## ... and Google ADK for TypeScript's agent (tests/frameworks/ts/adk: @google/adk brings its own
## OpenTelemetry JS 2.x and @google/genai), its spans ADK's own tracer's, exported by ../recording.ts;
## it takes tsx from the first. Cold npm cache: about 30 s, a 48 MB download, 154 MB on disk
TS_ADK := tests/frameworks/ts/adk/node_modules/.installed

## ... and Hugging Face tiny-agents (tests/frameworks/ts/tiny_agents: @huggingface/tiny-agents, its
## CLI `tiny-agents run`, and the MCP filesystem server it starts as its tools' stdio server,
## @modelcontextprotocol/server-filesystem). Cold npm cache: 7-18 s, a 28 MB download, 60 MB on
## disk
TS_TINY_AGENTS := tests/frameworks/ts/tiny_agents/node_modules/.installed

## ... and KaibanJS (tests/frameworks/ts/kaibanjs: kaibanjs, its bundle carrying LangChain JS and
## the OpenAI client, and @langchain/core for its tools); it takes tsx from the first. Cold npm
## cache: about 45 s, 244 MB on disk
TS_KAIBANJS := tests/frameworks/ts/kaibanjs/node_modules/.installed

## ... and Inngest AgentKit (tests/frameworks/ts/agentkit: @inngest/agent-kit, its peers inngest and
## zod, run standalone: no Inngest server); it takes tsx from the first. Cold npm cache: about 35 s,
## 319 MB on disk
TS_AGENTKIT := tests/frameworks/ts/agentkit/node_modules/.installed

## ... and Claude Code (tests/frameworks/ts/claude_code: @anthropic-ai/claude-code, its launcher
## and, as an optional dependency of the same version, its prebuilt binary for this platform,
## both from the npm registry; nothing is downloaded at install or first run; its launcher asks
## for node >= 22 but only links the binary, which runs on any). Cold npm cache: about 20 s, a
## 179 MB download, 384 MB installed
TS_CLAUDE_CODE := tests/frameworks/ts/claude_code/node_modules/.installed

## Qwen Code (tests/frameworks/qwen_code: @qwen-code/qwen-code, a TypeScript coding agent bundled
## on npm with no required dependency), exactly as locked, from the npm registry, without its
## optional native packages (terminal, clipboard, images: qwen -p uses none; five clipboard
## platform packages the registry answers 404 for are overridden by a local stand-in, else no lock
## is in sync). Cold npm cache: about 8 s, a 32 MB download, 123 MB on disk
QWEN_CODE_AGENT := tests/frameworks/qwen_code/node_modules/.installed

## Gemini CLI (tests/frameworks/gemini_cli: @google/gemini-cli, Google's TypeScript coding agent
## bundled on npm with no required dependency), exactly as locked, from the npm registry, without
## its optional native packages (a pseudo-terminal and the keychain: gemini -p with an API key
## uses neither). Cold npm cache: about 4 s, a 21 MB download, 96 MB on disk
GEMINI_CLI_AGENT := tests/frameworks/gemini_cli/node_modules/.installed

## the OpenAI Codex CLI (tests/frameworks/codex: @openai/codex, a Rust agent shipped on npm, its
## platform binary an optional dependency npm picks for this machine: no --omit=optional, no
## download at its first run), exactly as locked, from the npm registry. Cold npm cache: about
## 10 s, 420 MB on disk (the binary is 300 MB)
CODEX_AGENT := tests/frameworks/codex/node_modules/.installed

## opencode (tests/frameworks/opencode: opencode-ai, a TypeScript coding agent on Bun shipped on npm,
## its platform binary an optional dependency npm picks for this machine: no --omit=optional; the
## ten other platforms' packages, which the registry answers 404 for, overridden by a local
## stand-in, else no lock is in sync) with @opencode-ai/plugin, which opencode otherwise installs
## from npm into its config directory at its first run (the tests link it there), exactly as
## locked, from the npm registry. Cold npm cache: about 15 s, a 141 MB download, 417 MB on disk
## (the binary, 177 MB, and its AVX2-less "baseline" twin)
OPENCODE_AGENT := tests/frameworks/opencode/node_modules/.installed

## the Continue CLI (tests/frameworks/continue_cli: @continuedev/cli, `cn`, a TypeScript coding
## agent bundled on npm), exactly as locked, from the npm registry, without its optional native
## packages (sharp's image builds: cn -p reads no image). Cold npm cache: about 4 s, a 19 MB
## download, 65 MB on disk
CONTINUE_CLI_AGENT := tests/frameworks/continue_cli/node_modules/.installed

## the Cline CLI (tests/frameworks/cline: cline, a TypeScript coding agent compiled with Bun into a
## platform binary, its @cline/cli-linux-x64 an optional dependency npm picks for this machine: no
## --omit=optional; the five other platforms' packages, which the registry answers 404 for,
## overridden by a local stand-in, else no lock is in sync), exactly as locked, from the npm
## registry; its postinstall only links the binary (nothing is downloaded at install or first run).
## Cold npm cache: about 60 s, a 150 MB download, 434 MB on disk (the binary is 152 MB)
CLINE_AGENT := tests/frameworks/cline/node_modules/.installed

## pi (tests/frameworks/pi: @mariozechner/pi-coding-agent, a TypeScript coding agent on its own
## @mariozechner/pi-ai model library), exactly as locked, from the npm registry, without its
## optional clipboard packages (pi -p reads no clipboard); nothing is downloaded at install or first
## run. Cold npm cache: about 20 s, a 76 MB download, 174 MB on disk (the SDKs of pi-ai's
## providers: Google's, Mistral's, AWS Bedrock's, OpenAI's, Anthropic's)
PI_AGENT := tests/frameworks/pi/node_modules/.installed

## every npm install above: exactly as its lock says, from the npm registry (`npm ci`); without
## optional packages but where an agent's platform binary is one (ALL_OPTIONAL_NPM)
LEAN_NPM := $(TS_GENKIT) $(TS_MASTRA) $(TS_TRACELOOP) $(TS_VOLTAGENT) $(TS_LLAMAINDEX) \
	$(TS_STRANDS) $(TS_ADK) $(TS_TINY_AGENTS) $(TS_KAIBANJS) $(TS_AGENTKIT) $(QWEN_CODE_AGENT) \
	$(GEMINI_CLI_AGENT) $(CONTINUE_CLI_AGENT) $(PI_AGENT)
ALL_OPTIONAL_NPM := $(TS_AGENT) $(TS_CLAUDE_CODE) $(CODEX_AGENT) $(OPENCODE_AGENT) \
	$(CLINE_AGENT)
$(LEAN_NPM) $(ALL_OPTIONAL_NPM): %/node_modules/.installed: %/package.json %/package-lock.json
	cd $* && npm ci $(if $(filter $@,$(LEAN_NPM)),--omit=optional) --no-audit --no-fund \
		--loglevel=error
	touch $@

## the Go agents of the model endpoint's tests (tests/frameworks/go: openai-go and
## anthropic-sdk-go, as its go.mod and go.sum pin them, from the Go module proxy), built into the
## user's cache (AGENT_WATCHDOG_CACHE/goagent/<hash of its sources>/, as Go's module and build
## caches are the user's); .cache/goagent/<hash>/goagent links to it, which
## tests/frameworks/test_model_endpoint_go.py runs. Cold (no Go caches), about 3.5 CPU-minutes
## (docs/testing.md); a new clone of the same sources finds it built.
GO_AGENT_SOURCES := $(sort $(wildcard tests/frameworks/go/*.go) tests/frameworks/go/go.mod \
	tests/frameworks/go/go.sum)
GO_AGENT_HASH    := $(shell cat $(GO_AGENT_SOURCES) | sha256sum | cut -c1-16)
GO_AGENT         := .cache/goagent/$(GO_AGENT_HASH)/goagent
GO_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/goagent/$(GO_AGENT_HASH)/goagent

$(GO_AGENT_BUILT):
	mkdir -p $(@D)
	cd tests/frameworks/go && GOFLAGS='-mod=readonly -buildvcs=false' \
		GOPROXY=$${GOPROXY:-https://proxy.golang.org} go build -trimpath -o $(abspath $@).tmp-$$PPID .
	mv $@.tmp-$$PPID $@

$(GO_AGENT): $(GO_AGENT_SOURCES) $(GO_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(GO_AGENT_BUILT) $@

goagent: $(GO_AGENT)

## ... and the Genkit for Go agent of tests/frameworks/test_genkit_go.py (tests/frameworks/go/
## genkit, a module of its own: Genkit, its compat_oai plugin and the OpenTelemetry SDK with its
## OTLP/HTTP exporter, as its go.mod and go.sum pin them), built the same way into
## AGENT_WATCHDOG_CACHE/genkit-go/<hash of its sources>/; .cache/genkit-go/<hash>/genkit-go
## links to it. 45 CPU seconds with the modules in Go's cache (docs/testing.md).
GENKIT_GO_SOURCES := $(sort $(wildcard tests/frameworks/go/genkit/*.go)) \
	tests/frameworks/go/genkit/go.mod tests/frameworks/go/genkit/go.sum
GENKIT_GO_HASH    := $(shell cat $(GENKIT_GO_SOURCES) | sha256sum | cut -c1-16)
GENKIT_GO         := .cache/genkit-go/$(GENKIT_GO_HASH)/genkit-go
GENKIT_GO_BUILT   := $(AGENT_WATCHDOG_CACHE)/genkit-go/$(GENKIT_GO_HASH)/genkit-go

$(GENKIT_GO_BUILT):
	mkdir -p $(@D)
	cd tests/frameworks/go/genkit && GOFLAGS='-mod=readonly -buildvcs=false' \
		GOPROXY=$${GOPROXY:-https://proxy.golang.org} go build -trimpath -o $(abspath $@).tmp-$$PPID .
	mv $@.tmp-$$PPID $@

$(GENKIT_GO): $(GENKIT_GO_SOURCES) $(GENKIT_GO_BUILT)
	mkdir -p $(@D) && ln -sf $(GENKIT_GO_BUILT) $@

genkit-go: $(GENKIT_GO)

## the fantasy agent of the model endpoint's tests (tests/frameworks/go/fantasy: charm.land/fantasy,
## the Go agent library Crush is built on, doing what `crush run` does, as its go.mod and go.sum
## pin it, from the Go module proxy; Crush itself is not to be had here: its npm package
## downloads its binary at install, and the proxy does not serve its module), built into the
## user's cache as the Go agents are; tests/frameworks/test_model_endpoint_crush.py runs it.
## Cold (no Go caches): about 50 CPU seconds, 1.7 GB of memory at most, a 21 MB binary
FANTASY_AGENT_SOURCES := tests/frameworks/go/fantasy/main.go tests/frameworks/go/fantasy/go.mod \
	tests/frameworks/go/fantasy/go.sum
FANTASY_AGENT_HASH    := $(shell cat $(FANTASY_AGENT_SOURCES) | sha256sum | cut -c1-16)
FANTASY_AGENT         := .cache/fantasy-agent/$(FANTASY_AGENT_HASH)/fantasy-agent
FANTASY_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/fantasy-agent/$(FANTASY_AGENT_HASH)/fantasy-agent

$(FANTASY_AGENT_BUILT):
	mkdir -p $(@D)
	cd tests/frameworks/go/fantasy && GOFLAGS='-mod=readonly -buildvcs=false' \
		GOPROXY=$${GOPROXY:-https://proxy.golang.org} go build -trimpath -o $(abspath $@).tmp-$$PPID .
	mv $@.tmp-$$PPID $@

$(FANTASY_AGENT): $(FANTASY_AGENT_SOURCES) $(FANTASY_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(FANTASY_AGENT_BUILT) $@

fantasy-agent: $(FANTASY_AGENT)

## the LangChainGo agent of tests/frameworks/test_langchaingo.py (tests/frameworks/go/langchaingo,
## a module of its own: github.com/tmc/langchaingo's ReAct and OpenAI-functions agents, as its
## go.mod and go.sum pin them), built the same way into AGENT_WATCHDOG_CACHE/langchaingo-agent/
## <hash of its sources>/. About 45 CPU seconds with its modules in Go's cache, an 18 MB binary
LANGCHAINGO_AGENT_SOURCES := tests/frameworks/go/langchaingo/main.go \
	tests/frameworks/go/langchaingo/go.mod tests/frameworks/go/langchaingo/go.sum
LANGCHAINGO_AGENT_HASH    := $(shell cat $(LANGCHAINGO_AGENT_SOURCES) | sha256sum | cut -c1-16)
LANGCHAINGO_AGENT         := .cache/langchaingo-agent/$(LANGCHAINGO_AGENT_HASH)/langchaingo-agent
LANGCHAINGO_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/langchaingo-agent/$(LANGCHAINGO_AGENT_HASH)/langchaingo-agent

$(LANGCHAINGO_AGENT_BUILT):
	mkdir -p $(@D)
	cd tests/frameworks/go/langchaingo && GOFLAGS='-mod=readonly -buildvcs=false' \
		GOPROXY=$${GOPROXY:-https://proxy.golang.org} go build -trimpath -o $(abspath $@).tmp-$$PPID .
	mv $@.tmp-$$PPID $@

$(LANGCHAINGO_AGENT): $(LANGCHAINGO_AGENT_SOURCES) $(LANGCHAINGO_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(LANGCHAINGO_AGENT_BUILT) $@

langchaingo-agent: $(LANGCHAINGO_AGENT)

## the Eino agent of tests/frameworks/test_eino.py (tests/frameworks/go/eino, a module of its own:
## github.com/cloudwego/eino's ReAct agent and adk agents, eino-ext's OpenAI ChatModel, as its
## go.mod and go.sum pin them), built the same way into AGENT_WATCHDOG_CACHE/eino-agent/
## <hash of its sources>/. About 65 CPU seconds cold (an empty Go build cache, its modules in
## Go's module cache), a 26 MB binary
EINO_AGENT_SOURCES := tests/frameworks/go/eino/main.go tests/frameworks/go/eino/go.mod \
	tests/frameworks/go/eino/go.sum
EINO_AGENT_HASH    := $(shell cat $(EINO_AGENT_SOURCES) | sha256sum | cut -c1-16)
EINO_AGENT         := .cache/eino-agent/$(EINO_AGENT_HASH)/eino-agent
EINO_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/eino-agent/$(EINO_AGENT_HASH)/eino-agent

$(EINO_AGENT_BUILT):
	mkdir -p $(@D)
	cd tests/frameworks/go/eino && GOFLAGS='-mod=readonly -buildvcs=false' \
		GOPROXY=$${GOPROXY:-https://proxy.golang.org} go build -trimpath -o $(abspath $@).tmp-$$PPID .
	mv $@.tmp-$$PPID $@

$(EINO_AGENT): $(EINO_AGENT_SOURCES) $(EINO_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(EINO_AGENT_BUILT) $@

eino-agent: $(EINO_AGENT)

## the Rust agent of the model endpoint's tests (tests/frameworks/rust: async-openai, as its
## Cargo.lock pins it, from crates.io), built (debug profile: it builds faster than release) into
## the user's cache (AGENT_WATCHDOG_CACHE/rust-agent/<hash of its sources>/rust-agent; cargo's
## target dir AGENT_WATCHDOG_CACHE/rust-agent/target, its own, never native/'s; one build at a
## time, under target.lock, so that each copies out the binary it built);
## .cache/rust-agent/<hash>/rust-agent links to it, which
## tests/frameworks/test_model_endpoint_frameworks.py runs. Cold (no target dir): 129 CPU
## seconds, 0.9 GB of memory at most, 74 s on two shared cores (a release build: 279 CPU seconds);
## after a change of src/, 2 s; a new clone of the same sources finds it built.
RUST_AGENT_SOURCES := tests/frameworks/rust/Cargo.toml tests/frameworks/rust/Cargo.lock \
	$(sort $(wildcard tests/frameworks/rust/src/*.rs))
RUST_AGENT_HASH    := $(shell cat $(RUST_AGENT_SOURCES) | sha256sum | cut -c1-16)
RUST_AGENT         := .cache/rust-agent/$(RUST_AGENT_HASH)/rust-agent
RUST_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/rust-agent/$(RUST_AGENT_HASH)/rust-agent
RUST_AGENT_TARGET  := $(AGENT_WATCHDOG_CACHE)/rust-agent/target

$(RUST_AGENT_BUILT):
	@mkdir -p $(@D) && exec 9>$(AGENT_WATCHDOG_CACHE)/rust-agent/target.lock && flock 9 && \
	if [ ! -f $@ ]; then set -x; \
		(cd tests/frameworks/rust && CARGO_TARGET_DIR=$(RUST_AGENT_TARGET) \
			cargo build --locked --quiet) && \
		cp $(RUST_AGENT_TARGET)/debug/rust-agent $@.tmp-$$PPID && mv $@.tmp-$$PPID $@; \
	fi

$(RUST_AGENT): $(RUST_AGENT_SOURCES) $(RUST_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(RUST_AGENT_BUILT) $@

rust-agent: $(RUST_AGENT)

## ... and the rig agent of tests/frameworks/test_rig.py (tests/frameworks/rust/rig: rig-core with
## tracing-opentelemetry and the OTLP exporter, as its Cargo.lock pins them), built the same way
## into AGENT_WATCHDOG_CACHE/rig-agent/<hash of its sources>/rig-agent (its own target dir);
## .cache/rig-agent/<hash>/rig-agent links to it. Cold (no target dir): 132 CPU seconds, 7 min on
## two cores shared with a load of 8; after a change of src/, 3-4 s
RIG_AGENT_SOURCES := tests/frameworks/rust/rig/Cargo.toml tests/frameworks/rust/rig/Cargo.lock \
	$(sort $(wildcard tests/frameworks/rust/rig/src/*.rs))
RIG_AGENT_HASH    := $(shell cat $(RIG_AGENT_SOURCES) | sha256sum | cut -c1-16)
RIG_AGENT         := .cache/rig-agent/$(RIG_AGENT_HASH)/rig-agent
RIG_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/rig-agent/$(RIG_AGENT_HASH)/rig-agent
RIG_AGENT_TARGET  := $(AGENT_WATCHDOG_CACHE)/rig-agent/target

$(RIG_AGENT_BUILT):
	@mkdir -p $(@D) && exec 9>$(AGENT_WATCHDOG_CACHE)/rig-agent/target.lock && flock 9 && \
	if [ ! -f $@ ]; then set -x; \
		(cd tests/frameworks/rust/rig && CARGO_TARGET_DIR=$(RIG_AGENT_TARGET) \
			cargo build --locked --quiet) && \
		cp $(RIG_AGENT_TARGET)/debug/rig-agent $@.tmp-$$PPID && mv $@.tmp-$$PPID $@; \
	fi

$(RIG_AGENT): $(RIG_AGENT_SOURCES) $(RIG_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(RIG_AGENT_BUILT) $@

rig-agent: $(RIG_AGENT)

## ... and the langchain-rust agent of tests/frameworks/test_model_endpoint_langchain_rust.py
## (tests/frameworks/rust/langchain: langchain-rust's AgentExecutor, as its Cargo.lock pins it),
## built the same way into AGENT_WATCHDOG_CACHE/langchain-rust-agent/<hash of its sources>/
## langchain-rust-agent (its own target dir); .cache/langchain-rust-agent/<hash>/
## langchain-rust-agent links to it. Cold (no target dir): 130 CPU seconds, 75 s on two shared
## cores, 0.7 GB of target dir; after a change of src/, 2 s
LANGCHAIN_RUST_AGENT_SOURCES := tests/frameworks/rust/langchain/Cargo.toml \
	tests/frameworks/rust/langchain/Cargo.lock $(sort $(wildcard tests/frameworks/rust/langchain/src/*.rs))
LANGCHAIN_RUST_AGENT_HASH    := $(shell cat $(LANGCHAIN_RUST_AGENT_SOURCES) | sha256sum | cut -c1-16)
LANGCHAIN_RUST_AGENT         := .cache/langchain-rust-agent/$(LANGCHAIN_RUST_AGENT_HASH)/langchain-rust-agent
LANGCHAIN_RUST_AGENT_BUILT   := $(AGENT_WATCHDOG_CACHE)/langchain-rust-agent/$(LANGCHAIN_RUST_AGENT_HASH)/langchain-rust-agent
LANGCHAIN_RUST_AGENT_TARGET  := $(AGENT_WATCHDOG_CACHE)/langchain-rust-agent/target

$(LANGCHAIN_RUST_AGENT_BUILT):
	@mkdir -p $(@D) && exec 9>$(AGENT_WATCHDOG_CACHE)/langchain-rust-agent/target.lock && flock 9 && \
	if [ ! -f $@ ]; then set -x; \
		(cd tests/frameworks/rust/langchain && CARGO_TARGET_DIR=$(LANGCHAIN_RUST_AGENT_TARGET) \
			cargo build --locked --quiet) && \
		cp $(LANGCHAIN_RUST_AGENT_TARGET)/debug/langchain-rust-agent $@.tmp-$$PPID && mv $@.tmp-$$PPID $@; \
	fi

$(LANGCHAIN_RUST_AGENT): $(LANGCHAIN_RUST_AGENT_SOURCES) $(LANGCHAIN_RUST_AGENT_BUILT)
	mkdir -p $(@D) && ln -sf $(LANGCHAIN_RUST_AGENT_BUILT) $@

langchain-rust-agent: $(LANGCHAIN_RUST_AGENT)

## java-agent: the Java agents of the model endpoint's tests (tests/frameworks/java: LangChain4j and
## the anthropic-java SDK, as its pom.xml pins them), built by Maven from Maven Central into the
## user's cache (AGENT_WATCHDOG_CACHE/java-agent/<hash of its sources>/: agent.jar, lib/ the jars
## it runs on, classpath naming them, and agent.jsa, the classes a run loads as a class-data
## archive, from a training run of every agent against a scripted model of its own: a run starts
## in 0.8 s instead of 1.2 s); Maven's repository is AGENT_WATCHDOG_CACHE/m2;
## .cache/java-agent/<hash>/ links there (tests/frameworks/jvm.py hashes the same files and runs
## the JVM as JAVA_AGENT_JVM says). Cold (Maven downloads 100 MB with its plugins, compiles,
## trains): 15 s, 21 CPU-seconds; then nothing.
JAVA_AGENT_SOURCES := tests/frameworks/java/pom.xml \
	$(shell find tests/frameworks/java/src -type f -name '*.java' | LC_ALL=C sort)
JAVA_AGENT_HASH    := $(shell cat $(JAVA_AGENT_SOURCES) | sha256sum | cut -c1-16)
JAVA_AGENT_DIR     := $(AGENT_WATCHDOG_CACHE)/java-agent/$(JAVA_AGENT_HASH)
JAVA_AGENT         := .cache/java-agent/$(JAVA_AGENT_HASH)/classpath
JAVA_AGENT_JVM     := -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable -Xlog:all=error:stderr

$(JAVA_AGENT_DIR)/classpath:
	@mkdir -p $(@D) && exec 9>$(JAVA_AGENT_DIR).lock && flock 9 && if [ ! -f $@ ]; then \
		echo "building the Java agents into $(JAVA_AGENT_DIR)"; \
		rm -rf $(JAVA_AGENT_DIR).tmp $(@D)/* \
		&& mvn -B -q -f tests/frameworks/java/pom.xml -Dmaven.repo.local=$(AGENT_WATCHDOG_CACHE)/m2 \
			-Dagent.build.dir=$(JAVA_AGENT_DIR).tmp package \
		&& mv $(JAVA_AGENT_DIR).tmp/lib $(JAVA_AGENT_DIR).tmp/agent.jar $(@D)/ \
		&& rm -rf $(JAVA_AGENT_DIR).tmp \
		&& cp=$(@D)/agent.jar$$(ls $(@D)/lib | LC_ALL=C sort | sed 's|^|:$(@D)/lib/|' | tr -d '\n') \
		&& java $(JAVA_AGENT_JVM) -XX:ArchiveClassesAtExit=$(@D)/agent.jsa -cp "$$cp" agent.Main train \
		&& printf '%s\n' "$$cp" > $@.tmp && mv $@.tmp $@ || exit 1; \
	fi

$(JAVA_AGENT): $(JAVA_AGENT_DIR)/classpath
	mkdir -p .cache/java-agent && ln -sfn $(JAVA_AGENT_DIR) $(@D)

java-agent: $(JAVA_AGENT)

## maven-agent(LABEL,POM): the recipe of a Maven-built agent's classpath file, in the directory
## its sources' hash names ($(@D)): POM packaged into $(@D).tmp from Maven Central (Maven's
## repository AGENT_WATCHDOG_CACHE/m2), its agent.jar and lib/ moved into $(@D), and the
## classpath naming them written last (a build cut off leaves none); one build at a time.
define maven-agent
	@mkdir -p $(@D) && exec 9>$(@D).lock && flock 9 && if [ ! -f $@ ]; then \
		echo "building $(1) into $(@D)"; \
		rm -rf $(@D).tmp $(@D)/* \
		&& mvn -B -q -f $(2) -Dmaven.repo.local=$(AGENT_WATCHDOG_CACHE)/m2 \
			-Dagent.build.dir=$(@D).tmp package \
		&& mv $(@D).tmp/lib $(@D).tmp/agent.jar $(@D)/ \
		&& rm -rf $(@D).tmp \
		&& printf '%s\n' "$(@D)/agent.jar$$(ls $(@D)/lib | LC_ALL=C sort | sed 's|^|:$(@D)/lib/|' | tr -d '\n')" \
			> $@.tmp && mv $@.tmp $@ || exit 1; \
	fi
endef

## spring-ai-agent: the Spring AI agent of tests/frameworks/test_spring_ai.py (tests/frameworks/
## spring_ai: Spring AI's ChatClient on its OpenAI model, Micrometer Tracing's OpenTelemetry
## bridge and the OTLP exporter, as its pom.xml pins them), built by Maven from Maven Central the
## same way into AGENT_WATCHDOG_CACHE/spring-ai-agent/<hash of its sources>/ (agent.jar, lib/,
## classpath); .cache/spring-ai-agent/<hash>/ links there (tests/frameworks/jvm.py hashes the same
## files). Cold (Maven downloads 120 MB with its plugins, compiles): 87 s, 15 CPU-seconds on two
## cores shared with a load of 13; then nothing.
SPRING_AI_AGENT_SOURCES := tests/frameworks/spring_ai/pom.xml \
	$(shell find tests/frameworks/spring_ai/src -type f -name '*.java' | LC_ALL=C sort)
SPRING_AI_AGENT_HASH    := $(shell cat $(SPRING_AI_AGENT_SOURCES) | sha256sum | cut -c1-16)
SPRING_AI_AGENT_DIR     := $(AGENT_WATCHDOG_CACHE)/spring-ai-agent/$(SPRING_AI_AGENT_HASH)
SPRING_AI_AGENT         := .cache/spring-ai-agent/$(SPRING_AI_AGENT_HASH)/classpath

$(SPRING_AI_AGENT_DIR)/classpath:
	$(call maven-agent,the Spring AI agent,tests/frameworks/spring_ai/pom.xml)

$(SPRING_AI_AGENT): $(SPRING_AI_AGENT_DIR)/classpath
	mkdir -p .cache/spring-ai-agent && ln -sfn $(SPRING_AI_AGENT_DIR) $(@D)

spring-ai-agent: $(SPRING_AI_AGENT)

## koog-agent: the Koog agent of tests/frameworks/test_koog.py and of the model endpoint's tests
## (tests/frameworks/koog: JetBrains' Koog, Kotlin, with its own OpenTelemetry feature, as its
## pom.xml pins them), compiled by the Kotlin Maven plugin from Maven Central the same way into
## AGENT_WATCHDOG_CACHE/koog-agent/<hash of its sources>/ (agent.jar, lib/, classpath);
## .cache/koog-agent/<hash>/ links there (tests/frameworks/jvm.py hashes the same files). Cold
## (an empty Maven repository: 152 MB downloaded with the Kotlin compiler and Maven's plugins;
## lib/ is 44 MB, 163 jars): 83 s and 16 CPU-seconds on two cores shared with a load of 11; with
## the repository kept and a changed source, 26 s (the Kotlin compile); then nothing.
KOOG_AGENT_SOURCES := tests/frameworks/koog/pom.xml \
	$(shell find tests/frameworks/koog/src -type f -name '*.kt' | LC_ALL=C sort)
KOOG_AGENT_HASH    := $(shell cat $(KOOG_AGENT_SOURCES) | sha256sum | cut -c1-16)
KOOG_AGENT_DIR     := $(AGENT_WATCHDOG_CACHE)/koog-agent/$(KOOG_AGENT_HASH)
KOOG_AGENT         := .cache/koog-agent/$(KOOG_AGENT_HASH)/classpath

$(KOOG_AGENT_DIR)/classpath:
	$(call maven-agent,the Koog agent,tests/frameworks/koog/pom.xml)

$(KOOG_AGENT): $(KOOG_AGENT_DIR)/classpath
	mkdir -p .cache/koog-agent && ln -sfn $(KOOG_AGENT_DIR) $(@D)

koog-agent: $(KOOG_AGENT)

## collector: the OpenTelemetry Collector the scale-out tests run (tests/test_scale_out.py), built
## by the Collector builder from Go modules as tests/collector/builder-config.yaml says, into
## the user's cache (AGENT_WATCHDOG_CACHE/otelcol/<hash of that file>/, the builder beside it, as
## Go's module and build caches are the user's); .cache/otelcol/<hash>/ links to it. Cold, it
## costs about 8 CPU-minutes (downloads, the builder, the compile: 4 min on 2 idle cores), so
## make test builds it beside the venvs; with the Go caches kept and a new config, 25 s; a new
## clone of the same config finds it built.
OTELCOL_VERSION := v0.161.0
OTELCOL_CONFIG  := tests/collector/builder-config.yaml
OTELCOL_HASH    := $(shell sha256sum $(OTELCOL_CONFIG) | cut -c1-16)
OTELCOL         := .cache/otelcol/$(OTELCOL_HASH)/otelcol-watchdog
OTELCOL_DIR     := $(AGENT_WATCHDOG_CACHE)/otelcol/$(OTELCOL_HASH)
OTELCOL_BUILDER := $(AGENT_WATCHDOG_CACHE)/otelcol/builder-$(OTELCOL_VERSION)/builder
OTELCOL_GO      := GOFLAGS='-mod=mod -buildvcs=false' GOPROXY=$${GOPROXY:-https://proxy.golang.org}

$(OTELCOL_BUILDER):
	$(OTELCOL_GO) GOBIN=$(abspath $(@D)) go install go.opentelemetry.io/collector/cmd/builder@$(OTELCOL_VERSION)

$(OTELCOL_DIR)/otelcol-watchdog: | $(OTELCOL_BUILDER)
	rm -rf $(OTELCOL_DIR).tmp-$$PPID && mkdir -p $(OTELCOL_DIR).tmp-$$PPID $(@D)
	cd $(OTELCOL_DIR).tmp-$$PPID && $(OTELCOL_GO) $(OTELCOL_BUILDER) --config $(abspath $(OTELCOL_CONFIG))
	mv $(OTELCOL_DIR).tmp-$$PPID/build/otelcol-watchdog $@ && rm -rf $(OTELCOL_DIR).tmp-$$PPID

$(OTELCOL): $(OTELCOL_CONFIG) $(OTELCOL_DIR)/otelcol-watchdog
	mkdir -p $(@D) && ln -sf $(OTELCOL_DIR)/otelcol-watchdog $@

collector: $(OTELCOL)

## loadgen: the model endpoint bench's Go client and upstream (bench/loadgen, standard library
## only: nothing downloaded), built by the bench into the user's cache
## (AGENT_WATCHDOG_CACHE/loadgen/<hash of its sources>/) when missing; a few seconds
loadgen: $(VENV)/.installed-test
	$(PY) bench/model_endpoint.py --build-loadgen

## test: system packages first; then, FRAMEWORK_JOBS at once, .venv with test extras (its
## compiled parts), the Collector, the framework venvs, the dist venv, the TypeScript and Go agents,

## compiled parts), the Collector, the framework venvs, the dist venv, the TypeScript and Java agents,
## and lint (ruff and mypy: a lint error fails CI like a failing test) as soon as .venv is there;
## run every test (they run make dist once)
## Tests come in four tiers (tests/conftest.py): unit, integration (real sidecars), frameworks
## (real agent frameworks) and image (make dist's artifacts); TEST_WORKERS run them at once,
## the slowest tiers first, an idle worker taking tests from a busy one (--dist worksteal).
## At the end: the 15 slowest tests, and where the time went per tier and per file (all of it
## in .cache/test-times.json).
TEST_WORKERS ?= 3
test: system-deps
	$(MAKE) --no-print-directory -j$(FRAMEWORK_JOBS) $(VENV)/.installed-test $(OTELCOL) \
		$(FRAMEWORK_VENVS) $(TS_AGENT) $(TS_GENKIT) $(TS_MASTRA) $(TS_TRACELOOP) $(TS_VOLTAGENT) $(TS_LLAMAINDEX) $(TS_STRANDS) $(TS_ADK) $(TS_TINY_AGENTS) $(TS_KAIBANJS) $(TS_AGENTKIT) $(TS_CLAUDE_CODE) $(QWEN_CODE_AGENT) $(GEMINI_CLI_AGENT) $(CODEX_AGENT) $(OPENCODE_AGENT) $(CONTINUE_CLI_AGENT) $(CLINE_AGENT) $(PI_AGENT) $(GO_AGENT) $(GENKIT_GO) $(FANTASY_AGENT) $(LANGCHAINGO_AGENT) $(EINO_AGENT) $(RUST_AGENT) $(RIG_AGENT) $(LANGCHAIN_RUST_AGENT) $(JAVA_AGENT) $(SPRING_AI_AGENT) $(KOOG_AGENT) $(DIST_VENV)/.installed \
		$(CARGO_FUZZ) loadgen lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=15

## check: the unit tier alone (in-process, no sidecar, no framework; under a minute): the
## inner loop while changing the core. `make test` runs it too, with everything else.
check: $(VENV)/.installed-test
	$(PY) -m pytest -m unit -q -n 2

## dist: the release artifacts into dist/ (tools/dist.py): sdist and wheel of both
## distributions, the container image as a Docker archive (needs root: buildah, debootstrap)
## and the packaged Helm chart; tools/dist.py runs in a venv of its own (.venvs/dist)
$(DIST_VENV)/.installed: tools/dist-requirements.txt $(VENV)/.created
	rm -rf $(DIST_VENV)
	$(VENV)/bin/uv venv -q --python $(PYTHON) $(DIST_VENV)
	$(UV_PIP) --python $(DIST_PY) -r $<
	touch $@

dist: dist-python dist-image dist-chart

dist-python: $(DIST_VENV)/.installed
	$(NATIVE) $(DIST_PY) tools/dist.py python

dist-image: system-deps $(DIST_VENV)/.installed dist-python  # (it installs dist/'s wheel)
	$(DIST_PY) tools/dist.py image

dist-chart: $(DIST_VENV)/.installed
	$(DIST_PY) tools/dist.py chart

## lint: ruff and mypy on the Python, rustfmt on every Rust crate (each its own workspace)
RUST_CRATES := native native/otlp/fuzz bench/relayfloor tests/frameworks/rust tests/frameworks/rust/rig
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check watchdog client tests bench tools fuzz
	MYPY_CACHE_DIR=$(AGENT_WATCHDOG_CACHE)/mypy $(VENV)/bin/mypy
	for crate in $(RUST_CRATES); do (cd $$crate && cargo fmt --check) || exit 1; done

bench: $(VENV)/.installed-test loadgen
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) .venvs .cache build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .make-dist.lock \
		watchdog/core/spans/_native*.so \
		tests/frameworks/ts/node_modules tests/frameworks/ts/genkit/node_modules \
		tests/frameworks/ts/mastra/node_modules tests/frameworks/ts/voltagent/node_modules \
		tests/frameworks/ts/llamaindex/node_modules tests/frameworks/ts/strands/node_modules \
		tests/frameworks/ts/tiny_agents/node_modules \
		tests/frameworks/ts/claude_code/node_modules tests/frameworks/qwen_code/node_modules \
		tests/frameworks/codex/node_modules tests/frameworks/gemini_cli/node_modules \
		tests/frameworks/opencode/node_modules tests/frameworks/continue_cli/node_modules
