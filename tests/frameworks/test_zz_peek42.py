import json, sys
sys.path.insert(0, '.')
from tests.frameworks import test_model_endpoint_decorators as T
from tests.frameworks.test_model_endpoint_decorators import sidecar  # noqa
from tests.model_relays import model_relay  # noqa
from tests.frameworks.test_model_endpoint_text_actions import run_ids, new_runs
def test_peek(sidecar, llm):
    before = run_ids(sidecar)
    said, requests = T.run_agent(sidecar, llm, "magentic", "structured", "magentic-structured-budget", T.planning())
    print("SAID", said)
    for b in requests[:3]:
        print("REQ", json.dumps(b)[:1500])
    import time; time.sleep(0.3)
    for r in sidecar.get_json("/v1/runs?limit=1000")["runs"]:
        if r["id"] not in before:
            d = sidecar.get_json(f"/v1/runs/{r['id']}")
            print("RUN", {k: d.get(k) for k in ("state","iterations","tool_calls","terminal_state","final_output")})
