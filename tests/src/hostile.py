# The adversary campaign's hostile helper (tests/src/adversary.rs writes it
# into the cluster's jobs folder): what an unprivileged user's own program
# does to cderd's socket and to device descriptors. One mode per run:
#   silent SOCKET N SECONDS    open up to N connections, send nothing, hold them
#   flood SOCKET SECONDS       connect and close, with junk, from 4 threads
#   ask SOCKET LINE...         one connection per request line; print each reply
#   recv-fd SOCKET SECONDS     listen on SOCKET, keep every descriptor sent to it
#   send-fd SOCKET DEVICE...   open the first DEVICE it can, send it to SOCKET
#   open DEVICE...             print OPEN=<positions of the devices it can open>
#   hold PATH SECONDS          hold an O_PATH descriptor on PATH (nothing sent to its file system)
#   locks FILE N DUPS SECONDS  N POSIX byte-range locks on its own FILE and DUPS dups of
#                              that descriptor: each fdinfo of it lists every lock
import fcntl
import os
import resource
import select
import socket
import sys
import threading
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s


def silent(path, n, seconds):
    held = []
    for _ in range(n):
        try:
            held.append(connect(path))
        except OSError:
            break
    # cderd answers a connection it refuses with an error line and closes it.
    refused, _, _ = select.select(held, [], [], 0.5)
    print("HELD %d REFUSED %d" % (len(held) - len(refused), len(refused)), flush=True)
    time.sleep(seconds)


def flood(path, seconds):
    junk = [b"", b"{", b"\x00" * 70000, b'{"v":1,"op":"status"', b"not json\n", b'{"v":1,"op":"alloc"}\n']
    counts = []

    def worker(k):
        end, i = time.time() + seconds, k
        while time.time() < end:
            try:
                s = connect(path)
                s.sendall(junk[i % len(junk)])
                s.close()
            except OSError:
                time.sleep(0.01)
            i += 1
        counts.append(i - k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("CONNECTIONS %d" % sum(counts), flush=True)


def ask(path, lines):
    for line in lines:
        try:
            s = connect(path)
            s.settimeout(10)
            s.sendall(line.encode() + b"\n")
            reply = s.makefile("rb").readline().decode(errors="replace").strip()
            print(reply or "EOF", flush=True)
        except OSError as e:
            print("ERROR %s" % e, flush=True)


def recv_fd(path, seconds):
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o777)
    server.listen(8)
    held, end = [], time.time() + seconds
    while time.time() < end:
        server.settimeout(max(0.1, end - time.time()))
        try:
            conn, _ = server.accept()
        except OSError:
            continue
        msg, fds, _, _ = socket.recv_fds(conn, 4096, 8)
        held.extend(fds)
        print("GOT %s %d" % (msg.decode(errors="replace"), len(fds)), flush=True)


def send_fd(path, devices):
    for device in devices:
        try:
            fd = os.open(device, os.O_RDONLY)
        except OSError:
            continue
        socket.send_fds(connect(path), [device.encode()], [fd])
        print("SENT %s" % device, flush=True)
        return
    print("SENT nothing", flush=True)


def locks(path, n, dups, seconds):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    # Every other byte: adjacent ranges of one owner would merge into one lock.
    for i in range(n):
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = dups + 64 if hard == resource.RLIM_INFINITY else min(hard, dups + 64)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    held = []
    for _ in range(dups):
        try:
            held.append(os.dup(fd))
        except OSError:
            break
    print("LOCKED %d %d" % (n, len(held)), flush=True)
    open(path + ".ready", "w").close()
    time.sleep(seconds)


def can_open(devices):
    opened = []
    for i, device in enumerate(devices):
        try:
            os.close(os.open(device, os.O_RDONLY))
            opened.append(str(i))
        except OSError:
            pass
    print("OPEN=" + ",".join(opened), flush=True)


mode, args = sys.argv[1], sys.argv[2:]
if mode == "silent":
    silent(args[0], int(args[1]), float(args[2]))
elif mode == "flood":
    flood(args[0], float(args[1]))
elif mode == "ask":
    ask(args[0], args[1:])
elif mode == "recv-fd":
    recv_fd(args[0], float(args[1]))
elif mode == "send-fd":
    send_fd(args[0], args[1:])
elif mode == "open":
    can_open(args)
elif mode == "locks":
    locks(args[0], int(args[1]), int(args[2]), float(args[3]))
elif mode == "hold":
    held = os.open(args[0], os.O_PATH)
    print("HELD", flush=True)
    time.sleep(float(args[1]))
else:
    sys.exit("unknown mode " + mode)
