# The fork server of conftest.run_python, run as `python -c <this file's text>`.
#
# It imports torch (which autoloads torch_spyre) and torch._dynamo, which the
# first spyre op imports anyway (torch._prims_common's wrappers, for meta
# inference: 1.4 s of CPU), never starts the runtime, and forks one child per
# request: a fork before the runtime's
# first use is supported (test_registration.py, test_fork.py). The child puts
# the request's environment, cwd and output files in place and then runs the
# code as `python -c` would, at the top level of __main__, so the interpreter
# exits as usual (atexit, thread joins, finalization; an exception prints its
# traceback and exits 1). Only variables the runtime reads when it starts may
# differ from this server's environment (conftest decides; else a fresh
# interpreter runs the code).
#
# Requests: one JSON line each on REQUEST_FD ({"code", "env", "cwd", "stdout",
# "stderr"}). Replies on REPLY_FD: "pid\n" once forked, "exit code\n" once
# the child is reaped (negative: killed by that signal).


def _serve():
    import json
    import os
    import sys

    import torch  # noqa: F401  (and torch_spyre, through the backend autoload)
    import torch._dynamo  # noqa: F401

    import gc
    gc.freeze()  # children never collect (and so never write to) what was imported here
    requests = os.fdopen(int(sys.argv[1]), "rb")
    reply_fd = int(sys.argv[2])
    os.write(reply_fd, b"ready\n")
    while True:
        line = requests.readline()
        if not line:
            os._exit(0)
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            requests.close()
            os.close(reply_fd)
            os.setpgid(0, 0)  # its own group: a timeout kills what it started too
            for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(out, fd)
                os.close(out)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            os.chdir(request["cwd"])
            for name in [name for name in os.environ if name not in request["env"]]:
                del os.environ[name]
            os.environ.update(request["env"])
            sys.argv[:] = ["-c"]
            return request["code"]
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child did it first (or already exited)
        os.write(reply_fd, f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        os.write(reply_fd, f"{os.waitstatus_to_exitcode(status)}\n".encode())


_code = _serve()
del _serve
exec(compile(globals().pop("_code"), "<string>", "exec", dont_inherit=True))
