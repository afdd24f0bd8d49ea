"""Helpers the bench scripts share: ports, file descriptors, starting a release Warren."""
import os, resource, socket, subprocess, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARREN = os.path.join(ROOT, "target", "release", "warren")
PERF = os.path.join(ROOT, "target", "release", "warren-perf")


def raise_fd_limit():
    """Many-connection scenarios need more descriptors than the usual 1024 (inherited by the
    brokers and the tool started from here)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(target, 1 << 20), hard))
    except (ValueError, OSError):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def start_warren(base, http_port=0, metrics_port=0):
    """Starts the release binary on a free AMQP port with a fresh data dir under `base`;
    returns the process and the AMQP port."""
    os.makedirs(base, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen([WARREN, "--amqp-listen", f"127.0.0.1:{port}",
                             "--http-listen", f"127.0.0.1:{http_port}",
                             "--metrics-listen", f"127.0.0.1:{metrics_port}",
                             "--data-dir", os.path.join(base, "data"),
                             "--config", os.path.join(ROOT, "config", "warren.toml")],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, "warren.log"), "w"),
                            start_new_session=True)
    if not wait_port(port, 30):
        raise SystemExit("Warren did not start")
    proc.match = None
    return proc, port
