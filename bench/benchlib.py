"""Helpers the bench scripts share: ports, file descriptors, starting a release Warren and a
Debian RabbitMQ beside it, their CPU time and resident memory, and PNG charts (warren-plot)."""
import json, os, platform, random, resource, shutil, signal, socket, subprocess, sys, time

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


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
            return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A free port below the kernel's ephemeral range: a broker restarted on it (a boot
    measurement) must not find it taken by some client's outgoing connection meanwhile, as
    a port the kernel handed out (bind to 0) can be."""
    low, _ = _ephemeral_range()
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
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


def start_warren(base, http_port=0, metrics_port=0, binary=WARREN, config=None, extra=()):
    """Starts the release binary (or `binary`, with `config`, and `extra` flags) on a free AMQP
    port with a fresh data dir under `base`; returns the process and the AMQP port."""
    os.makedirs(base, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen([binary, "--amqp-listen", f"127.0.0.1:{port}",
                             "--http-listen", f"127.0.0.1:{http_port}",
                             "--metrics-listen", f"127.0.0.1:{metrics_port}",
                             "--data-dir", os.path.join(base, "data"),
                             "--config", config or os.path.join(ROOT, "config", "warren.toml"),
                             *extra],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(base, "warren.log"), "w"),
                            start_new_session=True)
    if not wait_port(port, 30):
        raise SystemExit("Warren did not start")
    proc.match = None
    return proc, port


def ensure_rabbitmq():
    if shutil.which("rabbitmq-server") is None:
        print("installing rabbitmq-server (Debian package)...", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "rabbitmq-server"], check=True, env=env)
    # A system node the package may have started is left alone: ours runs on its own ports.
    allow_rabbitmq_fds()


RABBITMQ_LIMITS = "/etc/security/limits.d/warren-bench-rabbitmq.conf"


def allow_rabbitmq_fds():
    """Debian's rabbitmq-server and ../shared/rabbitmq-cluster switch to the rabbitmq user with
    su / runuser, whose PAM session sets the open-files limit to 1024 unless limits.d says
    otherwise (the package's systemd unit gives 65536). A node with 1,000 connections or
    1,000 quorum queues runs out of descriptors with 1024 (emfile; then every HTTP login
    fails with an internal error). As root, give the rabbitmq user this process's hard limit."""
    if os.geteuid() != 0:
        return
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        hard = 65536
    want = f"rabbitmq soft nofile {hard}\nrabbitmq hard nofile {hard}\n"
    try:
        with open(RABBITMQ_LIMITS) as f:
            if f.read() == want:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(RABBITMQ_LIMITS), exist_ok=True)
    with open(RABBITMQ_LIMITS, "w") as f:
        f.write(want)


def start_rabbitmq(base, plugins=(), conf=""):
    """A RabbitMQ node on free ports with `plugins` enabled and `conf` appended to its
    rabbitmq.conf; returns its process, AMQP port and version."""
    os.makedirs(base, exist_ok=True)
    port, dist, epmd = free_port(), free_port(), free_port()
    for d in ("mnesia", "log"):
        os.makedirs(os.path.join(base, d), exist_ok=True)
    with open(os.path.join(base, "enabled_plugins"), "w") as f:
        f.write("[" + ",".join(plugins) + "].\n")
    with open(os.path.join(base, "rabbitmq.conf"), "w") as f:
        f.write("loopback_users = none\n" + conf)
    # Debian's rabbitmq-server drops root for the rabbitmq user, which must be able to write here.
    for d in (os.path.dirname(base), base, os.path.join(base, "mnesia"), os.path.join(base, "log")):
        os.chmod(d, 0o777)
    env = dict(os.environ,
               RABBITMQ_NODE_PORT=str(port), RABBITMQ_NODENAME=f"bench{port}@localhost",
               RABBITMQ_MNESIA_BASE=os.path.join(base, "mnesia"), RABBITMQ_LOG_BASE=os.path.join(base, "log"),
               RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(base, "enabled_plugins"),
               RABBITMQ_CONFIG_FILE=os.path.join(base, "rabbitmq"), RABBITMQ_DIST_PORT=str(dist),
               ERL_EPMD_PORT=str(epmd), RABBITMQ_FEATURE_FLAGS_FILE=os.path.join(base, "mnesia", "ff"),
               HOME=base)
    proc = subprocess.Popen(["rabbitmq-server"], env=env, stdout=open(os.path.join(base, "out.log"), "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    if not wait_port(port, 120):
        raise SystemExit("RabbitMQ did not start; see " + os.path.join(base, "out.log"))
    version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "rabbitmq-server"],
                             capture_output=True, text=True).stdout.strip()
    proc.match = f"epmd_port {epmd}"
    return proc, port, version


def pids_of(proc):
    """Every process of a broker: Warren's own, or RabbitMQ's (its start script hands over to
    beam.smp under the rabbitmq user, outside our process group), found by node name."""
    if proc.match is None:
        return [proc.pid]
    out = subprocess.run(["pgrep", "-f", proc.match], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()] + [proc.pid]


def signal_broker(proc, sig):
    for pid in pids_of(proc):
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def group_cpu(proc):
    return sum(cpu_seconds(p) for p in pids_of(proc))


def rss_mib(proc):
    total = 0
    for p in pids_of(proc):
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def stop_broker(proc):
    """Resumes (if paused) and stops a broker, killing it when it does not exit in a minute."""
    signal_broker(proc, signal.SIGCONT)
    signal_broker(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        signal_broker(proc, signal.SIGKILL)
        proc.wait()
    # beam.smp is not our child: wait until it is gone too.
    end = time.time() + 30
    while proc.match is not None and len(pids_of(proc)) > 1 and time.time() < end:
        time.sleep(0.2)


def pin(proc, cpus):
    """Pins every thread of a broker to `cpus` (a list of CPU numbers) with taskset."""
    mask = ",".join(str(c) for c in cpus)
    for pid in pids_of(proc):
        subprocess.run(["taskset", "-a", "-p", "-c", mask, str(pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def machine():
    """One line describing the machine: CPUs, model, memory."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30)
    return f"{os.cpu_count()} CPUs ({cpu}), {mem} GiB"


def warren_version():
    return subprocess.run([WARREN, "--version"], capture_output=True, text=True).stdout.strip()


FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def plot(spec, png):
    """Draws a chart (see bench/plot/src/main.rs for the JSON) with the warren-plot tool, built
    here; installs Debian's fonts-dejavu-core for its text when missing."""
    if not os.path.exists(FONT):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "fonts-dejavu-core"], check=True, env=env)
    manifest = os.path.join(ROOT, "bench", "plot", "Cargo.toml")
    subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path", manifest], check=True)
    tool = os.path.join(ROOT, "bench", "plot", "target", "release", "warren-plot")
    path = png + ".json"
    with open(path, "w") as f:
        json.dump(spec, f)
    try:
        subprocess.run([tool, path, png], check=True)
    finally:
        os.remove(path)


def splice_into_report(part):
    """Replaces the section a part file (docs/BENCHMARKS-*.md, starting with its `## ` heading)
    contributes to docs/BENCHMARKS.md with the part's new text, so a rerun of one bench updates
    the report without rerunning bench/compare."""
    report = os.path.join(ROOT, "docs", "BENCHMARKS.md")
    with open(part) as f:
        text = f.read().rstrip() + "\n"
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    try:
        with open(report) as f:
            old = f.read()
    except OSError:
        return
    start = old.find(headings[0] + "\n") if headings else -1
    if start < 0:
        return
    # The part's sections end where a section that is not the part's begins.
    end = start
    while True:
        nxt = old.find("\n## ", end + 1)
        if nxt < 0:
            end = len(old)
            break
        line = old[nxt + 1:].split("\n", 1)[0]
        if line not in headings:
            end = nxt + 1
            break
        end = nxt
    with open(report, "w") as f:
        f.write(old[:start] + text + ("\n" if end < len(old) else "") + old[end:])
