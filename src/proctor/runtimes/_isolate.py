"""The walls around what a rollout runs outside a sandbox: namespaces, a private /tmp, a uid.

Run as a script by `SubprocessRuntime` (stdlib only, so it starts in a few ms):

    python -I -S .../_isolate.py [--uid UID] [--keep PATH]... [--cwd DIR] [--linger 1] -- ARGV...

it runs ARGV (an environment server, a zygote, a foreign server command) behind walls:

- its own pid namespace (a private `/proc`: the driver and the other rollouts are not
  in it, so their environment, memory and processes are out of sight and out of reach),
  mount namespace (a fresh tmpfs on `/tmp` and `/dev/shm`, a private writable `HOME`
  and working folder in it) and IPC namespace;
- as root, `--uid` (a fresh uid of `proctor._uids`, no capabilities, no_new_privs): it
  reads only what everybody may read; as another user, an unprivileged user namespace
  maps that user's uid to itself and every capability is dropped before ARGV starts.

The `--keep` paths under `/tmp` or `/dev/shm` (the source's folder, the interpreter, the
working folder) are bound again into the fresh tmpfs at the same path, so they stay
readable. Three processes: this one (in the driver's pid namespace: it relays the exit
status and, if the driver dies, stops the group), the namespace's init (pid 1: it reaps,
and when ARGV exits so does it, taking every process left in the namespace along) and
ARGV. The warm pool's zygotes run here too, and wall each rollout they fork from the
others with `isolate_rollout` (a user, pid and mount namespace of its own).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import stat
import sys

TYPE_CHECKING = False  # typing's constant: importing typing costs the launcher ~4 ms
if TYPE_CHECKING:  # kept out of the launcher's start (a few ms each)
    from collections.abc import Iterable, Sequence
    from typing import NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CAP_VERSION_3 = 0x20080522
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # the same on every arch
_OPEN_TREE_CLONE, _AT_EMPTY_PATH, _AT_RECURSIVE = 1, 0x1000, 0x8000
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x00100000
PRIVATE = {"/tmp": "1777", "/dev/shm": "1777"}  # a fresh tmpfs on each
HOME = "/tmp/home"  # the private HOME (and default working folder), in the fresh /tmp
FAILED = 126  # exit status when the walls cannot be built
_NOT_ROOT = 1000  # what root in a user namespace without other uids runs ARGV as
INNER_PID = "PROCTOR_ISOLATED_PID="  # stderr line: ARGV's pid behind the walls
_GRACE = 5.0  # seconds the group gets to stop after the driver died


def libc() -> ctypes.CDLL:
    """The C library, with errno."""
    return ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
    """Raise OSError for a failed libc call."""
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    """mount(2)."""
    fs = fstype.encode() if fstype else None
    check(libc().mount(source.encode(), target.encode(), fs, flags, data.encode() or None), target)


def unshare(flags: int) -> None:
    """unshare(2); with CLONE_NEWUSER, map this process's own uid and gid to themselves."""
    uid, gid = os.getuid(), os.getgid()
    check(libc().unshare(flags), "unshare")
    if flags & CLONE_NEWUSER:
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")


def mounts_under(roots: Iterable[str]) -> list[str]:
    """The outermost mount points strictly below `roots`, from /proc/self/mountinfo."""
    with open("/proc/self/mountinfo", "rb") as f:
        points = [_unescape(line.split()[4]) for line in f.read().splitlines()]
    below = sorted(p for p in points if any(p.startswith(r + "/") for r in roots))
    outer: list[str] = []
    for point in below:
        if not any(point == o or point.startswith(o + "/") for o in outer):
            outer.append(point)
    return outer


def _unescape(field: bytes) -> str:
    """A mountinfo path: `\\ooo` octal escapes (space, tab, newline, backslash) undone."""
    parts = field.split(b"\\")
    out = parts[0]
    for part in parts[1:]:
        out += bytes([int(part[:3], 8)]) + part[3:]
    return os.fsdecode(out)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def closed_folders(paths: Iterable[str]) -> dict[str, str]:
    """The outermost folders above `paths` that others cannot pass (o+x), outside `PRIVATE`.

    A uid of the rollout's own could not reach `paths` through them: each gets a tmpfs
    (mode 755, hiding what else it holds) and `paths` are bound into it again.
    """
    closed: dict[str, str] = {}
    for path in paths:
        if any(path.startswith(r + "/") for r in [*PRIVATE, *closed]):
            continue
        parts = path.split("/")
        for depth in range(2, len(parts)):
            folder = "/".join(parts[:depth])
            with contextlib.suppress(OSError):
                if not os.stat(folder).st_mode & 0o001:
                    closed[folder] = "755"
                    break
    return closed


def private_mounts(
    keep: Sequence[str], owner: int, roots: dict[str, str], writable: str | None = None
) -> None:
    """In a new mount (and pid) namespace: a fresh /proc, a tmpfs on each of `roots`, a HOME.

    `roots` maps folders to the mode of their tmpfs. `keep` paths under them (and what
    is mounted there already) are bound again at the same place, read-only when `owner`
    could not read them otherwise; `writable` (the working folder the caller chose) is
    bound writable for `owner`. `HOME` is made for `owner`.
    """
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    roots = {p: mode for p, mode in roots.items() if os.path.isdir(p)}
    under = [p for p in keep if any(p.startswith(r + "/") for r in roots)]
    wanted = [p for p in under if p != writable]
    shared = os.open(writable, os.O_PATH) if writable is not None else -1
    kept = []
    for point in [*mounts_under(roots), *wanted]:
        with contextlib.suppress(OSError):  # gone meanwhile: nothing to keep
            kept.append((point, os.open(point, os.O_PATH)))
    for point, mode in roots.items():
        mount("tmpfs", point, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode}")
    for point, fd in kept:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            os.makedirs(point, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(point), exist_ok=True)
            os.close(os.open(point, os.O_CREAT | os.O_WRONLY, 0o644))
        need = 0o005 if stat.S_ISDIR(info.st_mode) else 0o004
        if owner == os.getuid() or info.st_mode & need == need or not _bind_as(fd, point, owner):
            mount(f"/proc/self/fd/{fd}", point, None, MS_BIND | MS_REC)
        os.close(fd)
    if writable is not None:
        os.makedirs(writable, exist_ok=True)
        if owner != os.getuid() and _bind_as(shared, writable, owner, readonly=False):
            pass
        elif owner != os.getuid() or writable in under:
            mount(f"/proc/self/fd/{shared}", writable, None, MS_BIND | MS_REC)
        os.close(shared)
    os.makedirs(HOME, mode=0o700, exist_ok=True)
    os.chown(HOME, owner, owner)


def _bind_as(fd: int, point: str, owner: int, *, readonly: bool = True) -> bool:
    """Bind `fd` at `point`, its owner's files shown as `owner`'s (an idmapped mount).

    For a folder closed to others (a private temporary folder holding the source): the
    rollout's uid reads it as its owner would (and, `readonly`, cannot write to it);
    what it creates there is its owner's on disk. False where the kernel or the file
    system cannot (Linux before 5.12, NFS, ...): the caller binds it as it is.
    """
    info = os.fstat(fd)
    try:
        _idmapped(fd, point, f"{info.st_uid} {owner} 1", f"{info.st_gid} {owner} 1", readonly)
    except OSError:
        return False
    return True


def _idmapped(fd: int, point: str, uid_map: str, gid_map: str, readonly: bool) -> None:
    lib = libc()
    userns = _userns(uid_map, gid_map)
    try:
        flags = _OPEN_TREE_CLONE | _AT_EMPTY_PATH | _AT_RECURSIVE
        tree = lib.syscall(_SYS_OPEN_TREE, fd, b"", flags)
        if tree < 0:
            check(-1, f"open_tree {point}")
        try:
            flags = _MOUNT_ATTR_IDMAP | (_MOUNT_ATTR_RDONLY if readonly else 0)
            attr = (ctypes.c_uint64 * 4)(flags, 0, 0, userns)
            check(
                lib.syscall(_SYS_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, attr, 32),
                f"idmapping {point}",
            )
            check(
                lib.syscall(_SYS_MOVE_MOUNT, tree, b"", -100, point.encode(), 4),
                f"move_mount {point}",
            )
        finally:
            os.close(tree)
    finally:
        os.close(userns)


def _userns(uid_map: str, gid_map: str) -> int:
    """An fd of a new user namespace with these maps (made by a short-lived child)."""
    said, say = os.pipe()
    hold, done = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(said)
            os.close(done)
            check(libc().unshare(CLONE_NEWUSER), "unshare")
            os.write(say, b"1")
            os.read(hold, 1)  # until the parent holds the namespace
        finally:
            os._exit(0)
    os.close(say)
    os.close(hold)
    try:
        if os.read(said, 1) != b"1":
            raise OSError("cannot make a user namespace for an idmapped bind")
        _write(f"/proc/{pid}/uid_map", uid_map)
        _write(f"/proc/{pid}/setgroups", "deny")
        _write(f"/proc/{pid}/gid_map", gid_map)
        return os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    finally:
        os.close(said)
        os.close(done)
        os.waitpid(pid, 0)


def drop_privileges(uid: int | None) -> None:
    """Become `uid` (as root), drop every capability, set no_new_privs; for good."""
    lib = libc()
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        check(lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping the bounding set")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(CAP_VERSION_3, 0)
    check(lib.capset(header, (ctypes.c_uint32 * 6)()), "capset")
    check(lib.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def isolate_rollout() -> None:
    """In a forked warm-pool child: a user, pid, mount and IPC namespace of its own.

    Only this process's children are in the new pid namespace: fork once more, then
    call `seal_rollout` in that child (pid 1 there).
    """
    unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)


def seal_rollout(cwd: str | None) -> None:
    """In the first process of `isolate_rollout`'s namespaces: private mounts, no privilege.

    Its /tmp, /dev/shm and HOME are its own (the zygote's are not visible), nested user
    namespaces are off, and every capability is dropped.
    """
    private_mounts([], os.getuid(), PRIVATE)
    _write("/proc/sys/user/max_user_namespaces", "0")
    os.chdir(cwd or HOME)
    drop_privileges(None)


def _init(
    argv: list[str], uid: int | None, cwd: str | None, keep: list[str], linger: bool
) -> NoReturn:
    """The namespace's pid 1: build the walls, start ARGV behind them, reap, relay its exit."""
    try:
        check(libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "pdeathsig")
        check(libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "dumpable")  # ARGV may share our uid
        owner = os.getuid() if uid is None else uid
        roots = {**PRIVATE, **(closed_folders(keep) if uid is not None else {})}
        private_mounts(keep, owner, roots, writable=cwd)
        env = {**os.environ, "HOME": HOME, "TMPDIR": "/tmp"}
        os.chdir(cwd or HOME)
    except OSError as exc:
        print(f"error: cannot isolate the process: {exc}", file=sys.stderr, flush=True)
        os._exit(FAILED)
    userns = -1
    if uid is None and os.geteuid() == 0:  # root in a user namespace, no uid to give away
        try:  # ARGV is then uid 1000 of a namespace of its own: it can make more (warm)
            userns = _userns(f"{_NOT_ROOT} 0 1", f"{_NOT_ROOT} {os.getgid()} 1")
        except OSError as exc:
            print(f"error: cannot isolate the process: {exc}", file=sys.stderr, flush=True)
            os._exit(FAILED)
    pid = os.fork()
    if pid == 0:
        try:
            if userns != -1:
                check(libc().setns(userns, CLONE_NEWUSER), "setns")
            drop_privileges(uid)
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            print(f"error: cannot start {argv[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127 if uid is None else FAILED)
    os.closerange(3, 1 << 16)  # the fds passed to ARGV are not ours to hold open
    os.write(2, f"{INNER_PID}{pid}\n".encode())  # whose teardown reports count
    code = FAILED
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:  # nothing left (with `linger`)
            os._exit(code)
        if done == pid:
            code = _code(status)
            if not linger:
                os._exit(code)


def _code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _relay(child: int, driver: int) -> NoReturn:
    """The outer process: wait for the init; if the driver dies, stop the group."""
    stopping = False

    def term(signum: int, frame: object) -> None:
        nonlocal stopping
        if os.getppid() == driver or stopping:
            return  # the driver signalled the whole group: ARGV has it too
        stopping = True  # our parent-death signal: stop everything, as the driver would
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGTERM)
        signal.setitimer(signal.ITIMER_REAL, _GRACE)

    def kill(signum: int, frame: object) -> None:
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(child, signal.SIGKILL)  # the init: every process behind the walls goes

    signal.signal(signal.SIGTERM, term)
    signal.signal(signal.SIGALRM, kill)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.closerange(3, 1 << 16)
    if os.getppid() != driver:  # it died before our signal handler was in place
        term(signal.SIGTERM, None)
    _, status = os.waitpid(child, 0)
    code = _code(status)
    if code > 128 and code - 128 < signal.NSIG:  # killed by a signal: die of it too
        sig = signal.Signals(code - 128)
        with contextlib.suppress(OSError):  # SIGKILL and SIGSTOP cannot be set
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(code)


def main(args: list[str]) -> int:
    """`_isolate.py [--uid UID] [--keep PATH]... [--cwd DIR] [--linger 1] -- ARGV...`."""
    uid: int | None = None
    cwd: str | None = None
    linger = False
    keep: list[str] = []
    while args and args[0] != "--":
        option, value, args = args[0], args[1], args[2:]
        if option == "--uid":
            uid = int(value)
        elif option == "--cwd":
            cwd = value
        elif option == "--keep":
            keep.append(value)
        elif option == "--linger":
            linger = value == "1"
    argv = args[1:]
    driver = os.getppid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
    try:
        unshare(flags if os.geteuid() == 0 else flags | CLONE_NEWUSER)
    except OSError as exc:
        print(
            f"error: cannot isolate the process ({exc}): it needs its own pid and mount "
            "namespace, as root or through an unprivileged user namespace (enable them: "
            "sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, or "
            "AppArmor's kernel.apparmor_restrict_unprivileged_userns=0), or use "
            "SandboxRuntime or ContainerRuntime",
            file=sys.stderr,
            flush=True,
        )
        return FAILED
    child = os.fork()
    if child == 0:
        _init(argv, uid, cwd, keep, linger)
    _relay(child, driver)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
