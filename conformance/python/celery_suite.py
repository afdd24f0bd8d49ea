"""Scenarios with kombu and Celery (py-amqp underneath): kombu's SimpleQueue and a real Celery
worker running tasks end to end, with late acknowledgements and retries through the broker."""
import os, subprocess, sys, time, uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scenario import eq, main, scenario  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Ctx:
    def __init__(self, a):
        self.url = a.broker


@scenario("basic.publish", "basic.get", "basic.ack", "queue.declare", "exchange.declare", "queue.bind")
def kombu_simple_queue(c):
    from kombu import Connection
    with Connection(c.url) as conn:
        qname = f"conf-kombu-{uuid.uuid4().hex[:8]}"
        q = conn.SimpleQueue(qname)
        for i in range(3):
            q.put({"n": i})
        got = []
        for _ in range(3):
            m = q.get(timeout=10)
            got.append(m.payload["n"])
            m.ack()
        eq(got, [0, 1, 2], "in order")
        # Cancel the consumer before deleting (deleting under it is a consumer cancel).
        q.close()
        conn.default_channel.queue_delete(qname)


def worker(c, queue):
    env = dict(os.environ, CONFORMANCE_BROKER=c.url, CONFORMANCE_QUEUE=queue)
    return subprocess.Popen([sys.executable, "-m", "celery", "-A", "celery_app", "worker", "--pool=solo",
                             "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=WARNING"],
                            cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@scenario("basic.consume", "basic.qos", "basic.deliver", "basic.ack")
def celery_tasks_retries_and_late_acks(c):
    queue = f"conf-celery-{uuid.uuid4().hex[:8]}"
    os.environ["CONFORMANCE_BROKER"] = c.url
    os.environ["CONFORMANCE_QUEUE"] = queue
    sys.path.insert(0, HERE)
    import celery_app
    proc = worker(c, queue)
    try:
        results = [celery_app.add.delay(i, i) for i in range(10)]
        eq([r.get(timeout=60) for r in results], [2 * i for i in range(10)], "results")
        eq(celery_app.flaky.delay(3).get(timeout=60), 3, "succeeded on the third attempt")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    sys.exit(main("celery", Ctx))
