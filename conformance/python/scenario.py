"""A tiny scenario registry shared by the Python suites: each scenario names the AMQP methods
(`class.method`) and RabbitMQ extensions (`ext:name`) it exercises; the target version is set
for scenarios that follow RabbitMQ 3.13/4.x on purpose where 3.10 differs. Results are printed
as JSON lines for conformance/run."""
import argparse, json, sys, time, traceback

SCENARIOS = []


def scenario(*covers, target=None, differs=None):
    """Registers a scenario. `target`: the RabbitMQ version whose behaviour it asserts when it
    is newer than 3.10; `differs`: what 3.10 does instead."""
    def wrap(fn):
        SCENARIOS.append({"fn": fn, "name": fn.__name__, "covers": list(covers),
                          "target": target, "differs": differs})
        return fn
    return wrap


class Skip(Exception):
    """Raised by a scenario that cannot run here (a missing tool, say)."""


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what}: expected {want!r}, got {got!r}")


def main(suite, make_context):
    """Parses --broker/--http/--only, runs every scenario with a fresh context and prints one
    JSON line per scenario."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--broker", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    for s in SCENARIOS:
        if only and s["name"] not in only:
            continue
        t0 = time.time()
        status, error = "passed", None
        try:
            s["fn"](make_context(a))
        except Skip as e:
            status, error = "skipped", str(e)
        except Exception as e:  # noqa: BLE001 - a scenario's failure is data here
            status = "failed"
            error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"
        print(json.dumps({"suite": suite, "scenario": s["name"], "status": status,
                          "covers": s["covers"], "target": s["target"], "differs": s["differs"],
                          "error": error, "seconds": round(time.time() - t0, 3)}), flush=True)
    return 0
