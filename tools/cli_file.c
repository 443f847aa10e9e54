/* Whole files for the CLI: read-only maps, and atomic writes (a temporary
 * file in the same directory, fsync'd, then renamed over the target, so a
 * reader never sees a torn file). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

const char *cli_file_kind(mode_t mode) {
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISSOCK(mode) ? "a socket"
                            : "no regular file";
}

int cli_map_file(const char *path, cli_map_t *m) {
    memset(m, 0, sizeof *m);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: cannot open %s: %s\n", cli_parse_who(), path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        fprintf(stderr, "%s: cannot stat %s: %s\n", cli_parse_who(), path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        fprintf(stderr, "%s: %s is %s, not a regular file\n", cli_parse_who(), path, cli_file_kind(sb.st_mode));
        close(fd);
        return -1;
    }
    m->len = (size_t)sb.st_size;
    if (m->len) {
        m->data = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->data == MAP_FAILED) {
            fprintf(stderr, "%s: cannot map %s: %s\n", cli_parse_who(), path, strerror(errno));
            m->data = NULL;
            close(fd);
            return -1;
        }
    }
    close(fd);
    return 0;
}

void cli_unmap_file(cli_map_t *m) {
    if (m->data) munmap((void *)m->data, m->len);
    memset(m, 0, sizeof *m);
}

int cli_write_atomic(const char *path, const void *data, size_t len) {
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) return -1;
    snprintf(tmp, n, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "%s: cannot create %s: %s\n", cli_parse_who(), tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    const unsigned char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "%s: writing %s: %s\n", cli_parse_who(), tmp, w < 0 ? strerror(errno) : "no space written");
            close(fd);
            unlink(tmp);
            free(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: publishing %s: %s\n", cli_parse_who(), path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    /* the rename itself reaches the disk with the directory */
    char *slash = strrchr(tmp, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? (slash == tmp ? "/" : tmp) : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(tmp);
    return 0;
}

/* Whether a file can be created in dir: the honest test is to create one
 * (access() says yes to root on a directory it cannot write, e.g. in /sys).
 * Errors read "ferry: LABEL: ..." and name dir unless it is the label's path. */
static int probe_dir(const char *dir, const char *label, bool named) {
    char where[4200] = "";
    if (!named) snprintf(where, sizeof where, "directory %s: ", dir);
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        fprintf(stderr, "%s: %s: %s%s\n", cli_parse_who(), label, where, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "%s: %s: %sis %s, not a directory\n", cli_parse_who(), label, where, cli_file_kind(sb.st_mode));
        return -1;
    }
    size_t n = strlen(dir) + 64;
    char *probe = malloc(n);
    if (!probe) return -1;
    snprintf(probe, n, "%s/.ferry-probe-%d", dir, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "%s: %s: %scannot create files there: %s\n", cli_parse_who(), label, where, strerror(errno));
        free(probe);
        return -1;
    }
    close(fd);
    unlink(probe);
    free(probe);
    return 0;
}

static void make_label(char *buf, size_t size, const char *what, const char *path) {
    snprintf(buf, size, "%s %s", what, path);
}

int cli_check_dir(const char *path, const char *what) {
    char label[4200];
    make_label(label, sizeof label, what, path);
    if (!*path) {
        fprintf(stderr, "%s: %s: an empty path\n", cli_parse_who(), what);
        return -1;
    }
    return probe_dir(path, label, true);
}

int cli_check_output(const char *path, const char *what) {
    char label[4200];
    make_label(label, sizeof label, what, path);
    if (!*path) {
        fprintf(stderr, "%s: %s: an empty path\n", cli_parse_who(), what);
        return -1;
    }
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISREG(sb.st_mode)) {
            /* the atomic rename would replace it (a device node, as root) or fail late */
            fprintf(stderr, "%s: %s: is %s; outputs are regular files\n", cli_parse_who(), label, cli_file_kind(sb.st_mode));
            return -1;
        }
    } else if (errno != ENOENT && errno != ENOTDIR) { /* those two: the directory says why */
        fprintf(stderr, "%s: %s: %s\n", cli_parse_who(), label, strerror(errno));
        return -1;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) return probe_dir(".", label, false);
    if (slash == path) return probe_dir("/", label, false);
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir) return -1;
    int rc = probe_dir(dir, label, false);
    free(dir);
    return rc;
}
