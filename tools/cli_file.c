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

int cli_map_file(const char *path, cli_map_t *m) {
    memset(m, 0, sizeof *m);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "ferry: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fprintf(stderr, "ferry: %s is not a regular file\n", path);
        close(fd);
        return -1;
    }
    m->len = (size_t)sb.st_size;
    if (m->len) {
        m->data = mmap(NULL, m->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m->data == MAP_FAILED) {
            fprintf(stderr, "ferry: cannot map %s: %s\n", path, strerror(errno));
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
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "ferry: cannot create %s: %s\n", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    const unsigned char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            fprintf(stderr, "ferry: writing %s: %s\n", tmp, w < 0 ? strerror(errno) : "no space written");
            close(fd);
            unlink(tmp);
            free(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "ferry: publishing %s: %s\n", path, strerror(errno));
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
