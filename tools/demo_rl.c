/* `ferry demo --rl`: the RL loop with a real model (python/ferry/rl_loop.py:
 * a transformers Qwen3 trained with AdamW, an engine in vLLM's fused layout,
 * logits compared at every version). It lives in the Python package, since
 * it needs torch and transformers; this replaces the CLI process with
 * Python running it, so its exit status and signals are the loop's. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* Run as `python3 -c BOOT ARGS...`: says what is missing before anything
 * starts, rather than failing in a child process later. */
static const char boot[] =
    "import sys\n"
    "try:\n"
    "    import ferry.rl_loop\n"
    "except ImportError as e:\n"
    "    sys.exit(f'ferry demo --rl: {sys.executable} cannot import the ferry Python package ({e}); build it '\n"
    "             '(-DFERRY_PYTHON=ON) or pip install . from the repository, or set FERRY_PYTHON to a Python '\n"
    "             'that has it')\n"
    "missing = []\n"
    "for m in ('torch', 'transformers'):\n"
    "    try:\n"
    "        __import__(m)\n"
    "    except ImportError:\n"
    "        missing.append(m)\n"
    "if missing:\n"
    "    sys.exit(f'ferry demo --rl: {sys.executable} lacks {\" and \".join(missing)} '\n"
    "             '(scripts/pydeps.sh installs them into .venv; FERRY_PYTHON picks the Python)')\n"
    "sys.exit(ferry.rl_loop.main(sys.argv[1:], prog='ferry demo --rl'))\n";

/* The build tree's Python package sits beside the CLI (BUILD/python/ferry):
 * it goes first on PYTHONPATH, so the CLI and the package are one build. */
static int prepend_build_package(void) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/python/ferry/__init__.py", exe);
    if (access(probe, R_OK) != 0) return 0;
    const char *old = getenv("PYTHONPATH");
    size_t len = strlen(exe) + sizeof "/python" + (old && *old ? strlen(old) + 1 : 0);
    char *path = malloc(len);
    if (!path) return -1;
    snprintf(path, len, "%s/python%s%s", exe, old && *old ? ":" : "", old && *old ? old : "");
    int rc = setenv("PYTHONPATH", path, 1);
    free(path);
    return rc;
}

int cmd_demo_rl(int argc, char **argv) {
    const char *py = getenv("FERRY_PYTHON");
    if (!py || !*py) py = "python3";
    if (prepend_build_package() != 0) {
        fprintf(stderr, "ferry demo --rl: setting PYTHONPATH: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    /* argv[0] is "demo", argv[1] "--rl": the rest is the loop's */
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return CLI_FAIL;
    args[0] = (char *)py;
    args[1] = "-c";
    args[2] = (char *)boot;
    for (int i = 2; i < argc; i++) args[i + 1] = argv[i];
    fflush(stdout);
    execvp(py, args);
    fprintf(stderr, "ferry demo --rl: cannot run %s: %s (it needs Python with torch and transformers; FERRY_PYTHON picks it)\n",
            py, strerror(errno));
    free(args);
    return CLI_FAIL;
}
