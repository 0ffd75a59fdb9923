/*
 * unified_only.so: a preload for the test slurmd of the production-v2 profile (and the
 * slurmstepds it starts), on a host that mounts cgroup v1 hierarchies.
 *
 * The kernel lists every active cgroup hierarchy in /proc/PID/cgroup, whatever a mount
 * namespace mounts: on a host with v1 hierarchies the unified line `0::/path` comes last.
 * Slurm's cgroup/v2 plugin reads that file and stops at once ("Hybrid mode is not
 * supported") when its first line is not the unified one. The test slurmd runs in a mount
 * namespace of its own where only the cgroup2 hierarchy is mounted, at /sys/fs/cgroup, as
 * on a node booted with the unified hierarchy alone; this preload makes /proc/PID/cgroup
 * read as it reads there: the `0::` line only. Everything else is the kernel's: the
 * cgroup2 tree, its cgroup.procs, cgroup.kill, and the eBPF device programs Slurm attaches.
 * Only opens of exactly /proc/<self|thread-self|N>/cgroup are changed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int is_proc_cgroup(const char *path)
{
	const char *p;
	if (!path || strncmp(path, "/proc/", 6))
		return 0;
	p = path + 6;
	if (!strncmp(p, "self/", 5))
		p += 5;
	else if (!strncmp(p, "thread-self/", 12))
		p += 12;
	else {
		const char *d = p;
		while (*p >= '0' && *p <= '9')
			p++;
		if (p == d || *p != '/')
			return 0;
		p++;
	}
	return !strcmp(p, "cgroup");
}

/* A memfd holding the unified line of the real file; -1 where that fails. */
static int unified_copy(int real)
{
	char buf[8192], out[8192];
	ssize_t n = 0, r;
	size_t o = 0;
	int fd;
	char *line, *save = NULL;

	while (n < (ssize_t)sizeof(buf) - 1 &&
	       (r = read(real, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += r;
	close(real);
	buf[n < 0 ? 0 : n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		size_t len = strlen(line);
		if (strncmp(line, "0::", 3) || o + len + 1 > sizeof(out))
			continue;
		memcpy(out + o, line, len);
		o += len;
		out[o++] = '\n';
	}
	fd = memfd_create("cgroup", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	if (write(fd, out, o) != (ssize_t)o || lseek(fd, 0, SEEK_SET) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

typedef int (*openat_t)(int, const char *, int, ...);

static int filtered(int dirfd, const char *path, int flags, mode_t mode,
		    const char *sym)
{
	openat_t real = (openat_t)dlsym(RTLD_NEXT, sym);
	int fd = real(dirfd, path, flags, mode);
	if (fd < 0 || !is_proc_cgroup(path) || (flags & O_ACCMODE) != O_RDONLY)
		return fd;
	return unified_copy(fd);
}

#define MODE_ARG                                                              \
	mode_t mode = 0;                                                      \
	if (flags & (O_CREAT | O_TMPFILE)) {                                  \
		va_list ap;                                                   \
		va_start(ap, flags);                                          \
		mode = va_arg(ap, mode_t);                                    \
		va_end(ap);                                                   \
	}

int openat(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG
	return filtered(dirfd, path, flags, mode, "openat");
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	MODE_ARG
	return filtered(dirfd, path, flags, mode, "openat64");
}

int open(const char *path, int flags, ...)
{
	MODE_ARG
	return filtered(AT_FDCWD, path, flags, mode, "openat");
}

int open64(const char *path, int flags, ...)
{
	MODE_ARG
	return filtered(AT_FDCWD, path, flags, mode, "openat64");
}

FILE *fopen(const char *path, const char *how)
{
	FILE *(*real)(const char *, const char *) = dlsym(RTLD_NEXT, "fopen");
	int fd;
	if (!is_proc_cgroup(path) || (strcmp(how, "r") && strcmp(how, "re")))
		return real(path, how);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? NULL : fdopen(fd, "r");
}

FILE *fopen64(const char *path, const char *how)
{
	return fopen(path, how);
}
