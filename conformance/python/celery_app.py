"""The Celery application the celery suite's worker runs: tasks late-acknowledged
(`acks_late`), one that fails twice before it succeeds (retries through the broker)."""
import os

from celery import Celery

app = Celery("conformance", broker=os.environ["CONFORMANCE_BROKER"], backend="rpc://")
app.conf.update(task_acks_late=True, worker_prefetch_multiplier=1, task_default_queue=os.environ["CONFORMANCE_QUEUE"],
                broker_connection_retry_on_startup=True, result_expires=300)


@app.task
def add(x, y):
    return x + y


@app.task(bind=True, max_retries=5)
def flaky(self, succeed_on):
    """Fails until its `succeed_on`-th attempt; returns the attempt number."""
    attempt = self.request.retries + 1
    if attempt < succeed_on:
        raise self.retry(countdown=0.2, exc=RuntimeError(f"attempt {attempt}"))
    return attempt
