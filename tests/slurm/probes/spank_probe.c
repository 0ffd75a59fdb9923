/*
 * spank_probe: a SPANK plugin that only records where Slurm calls it. For the harness
 * test `spank_callbacks_where_who_when` (tests/slurm/tests/cluster_profiles.rs) and for
 * docs/slurm-callbacks.md, not for production.
 *
 * Each callback appends one line to the log (plugstack argument log=PATH):
 *
 *   cb=NAME ctx=CONTEXT job=ID step=ID task=ID nodeid=N uid=U euid=E pid=P ppid=PP
 *   mnt=mnt:[INODE] freezer=PATH memory=PATH shm=0|1 opt=VALUE envopt=VALUE t=NS
 *
 * shm: does /dev/shm/colloc-probe-JOBID exist (a job's task creates it); opt: the
 * probe's own --probe-mark option as spank_option_getopt gives it (- where it is not
 * available); envopt: that option as the job's SPANK environment carries it (getenv in
 * prolog/epilog, spank_getenv in slurmstepd); t: CLOCK_REALTIME in nanoseconds.
 *
 * Daemons: where the control file (plugstack argument ctl=PATH) has a line
 * "daemon STEP:CALLBACK" or "daemon STEP:CALLBACK join" (STEP: batch, extern, a step
 * number, - for prolog and epilog, * for any), that callback starts a daemon as a real
 * one would (fork, setsid, fork, stdio to /dev/null) that records itself with cb=daemon
 * from=STEP:CALLBACK and the signals it inherited blocked (sigblk=HEX, bit N-1 for
 * signal N), creates /dev/shm/colloc-probe-daemon-JOBID-STEP-CALLBACK, writes its pid
 * to LOGDIR/daemon-JOBID-STEP-CALLBACK-PID.pid and sleeps for 600 s. With "join" it
 * first enters the job's mount namespace through job_container/tmpfs's holder file
 * (plugstack argument jc=BASEPATH; it tries BASEPATH/JOBID/.ns and
 * BASEPATH/<any node>/JOBID/.ns, as Slurm built with --enable-multiple-slurmd adds the
 * node name; another node's holder is an empty file here, which setns refuses); with
 * "join-step" it also moves itself into the extern step's freezer cgroup (v1). The
 * epilog records which of the job's daemons still run (alive=STEP-CALLBACK-PID:0|1,...).
 *
 * Build: gcc -shared -fPIC -Wall -Werror -o spank_probe.so spank_probe.c
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(probe, 1);

static char log_path[4096];
static char ctl_path[4096];
static char jc_base[4096];

static int mark_cb(int val, const char *optarg, int remote)
{
	(void)val;
	(void)optarg;
	(void)remote;
	return 0;
}

static struct spank_option mark_opt = {
	"probe-mark", "WORD", "spank_probe: a value to follow through the callbacks", 1, 0,
	mark_cb,
};

static void parse_args(int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (!strncmp(av[i], "log=", 4))
			snprintf(log_path, sizeof(log_path), "%s", av[i] + 4);
		else if (!strncmp(av[i], "ctl=", 4))
			snprintf(ctl_path, sizeof(ctl_path), "%s", av[i] + 4);
		else if (!strncmp(av[i], "jc=", 3))
			snprintf(jc_base, sizeof(jc_base), "%s", av[i] + 3);
	}
}

static const char *ctx_name(void)
{
	switch (spank_context()) {
	case S_CTX_LOCAL: return "local";
	case S_CTX_REMOTE: return "remote";
	case S_CTX_ALLOCATOR: return "allocator";
	case S_CTX_SLURMD: return "slurmd";
	case S_CTX_JOB_SCRIPT: return "job_script";
	default: return "error";
	}
}

/* The cgroup path of controller `ctl` in /proc/self/cgroup, "-" if none. */
static void cgroup_of(const char *ctl, char *out, size_t len)
{
	char line[1024];
	FILE *f = fopen("/proc/self/cgroup", "r");

	snprintf(out, len, "-");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		char *a = strchr(line, ':');
		char *b = a ? strchr(a + 1, ':') : NULL;
		if (!a || !b)
			continue;
		*b = '\0';
		if (!strcmp(a + 1, ctl)) {
			b[1 + strcspn(b + 1, "\n")] = '\0';
			snprintf(out, len, "%s", b + 1);
			break;
		}
	}
	fclose(f);
}

static uint32_t job_id(spank_t sp)
{
	uint32_t id = 0;
	if (spank_get_item(sp, S_JOB_ID, &id) != ESPANK_SUCCESS) {
		const char *e = getenv("SLURM_JOB_ID");
		id = e ? (uint32_t)strtoul(e, NULL, 10) : 0;
	}
	return id;
}

/* The step as squeue names it: batch, extern, a number, or - outside a step. */
static void step_name(spank_t sp, char *out, size_t len)
{
	uint32_t v;
	if (spank_get_item(sp, S_JOB_STEPID, &v) != ESPANK_SUCCESS)
		snprintf(out, len, "-");
	else if (v == 0xfffffffc)
		snprintf(out, len, "extern");
	else if (v == 0xfffffffb)
		snprintf(out, len, "batch");
	else if (v == 0xfffffffa)
		snprintf(out, len, "interactive");
	else
		snprintf(out, len, "%u", v);
}

static void item_u32(spank_t sp, spank_item_t item, char *out, size_t len)
{
	uint32_t v;
	if (spank_get_item(sp, item, &v) == ESPANK_SUCCESS)
		snprintf(out, len, "%u", v);
	else
		snprintf(out, len, "-");
}

/* The --probe-mark value as the job's environment carries it. */
static void env_opt(spank_t sp, char *out, size_t len)
{
	static const char *names[] = {
		"SPANK__SLURM_SPANK_OPTION_probe_probe_mark",
		"_SLURM_SPANK_OPTION_probe_probe_mark",
		NULL,
	};
	char buf[256];

	snprintf(out, len, "-");
	for (int i = 0; names[i]; i++) {
		const char *v = getenv(names[i]);
		if (v) {
			snprintf(out, len, "getenv:%s", v);
			return;
		}
		if (spank_context() == S_CTX_REMOTE &&
		    spank_getenv(sp, names[i], buf, sizeof(buf)) == ESPANK_SUCCESS) {
			snprintf(out, len, "spank_getenv:%s", buf);
			return;
		}
	}
}

static void append(const char *line)
{
	int fd;
	if (!log_path[0])
		return;
	fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		return;
	/* One write per line: lines of concurrent processes do not mix. */
	if (write(fd, line, strlen(line)) < 0) {
		/* nothing to do: a probe must not fail the job */
	}
	close(fd);
}

static void record(spank_t sp, const char *cb, const char *extra)
{
	char line[4096], step[32], task[32], nodeid[32], mnt[64] = "-", fr[512], mem[512];
	char shm[300], opt_s[128] = "-", envo[300];
	char *opt = NULL;
	struct timespec ts;
	uint32_t job = job_id(sp);
	int tid;
	ssize_t n;

	step_name(sp, step, sizeof(step));
	item_u32(sp, S_JOB_NODEID, nodeid, sizeof(nodeid));
	if (spank_get_item(sp, S_TASK_ID, &tid) == ESPANK_SUCCESS)
		snprintf(task, sizeof(task), "%d", tid);
	else
		snprintf(task, sizeof(task), "-");
	n = readlink("/proc/self/ns/mnt", mnt, sizeof(mnt) - 1);
	mnt[n > 0 ? n : 1] = '\0';
	cgroup_of("freezer", fr, sizeof(fr));
	cgroup_of("memory", mem, sizeof(mem));
	snprintf(shm, sizeof(shm), "/dev/shm/colloc-probe-%u", job);
	if (spank_option_getopt(sp, &mark_opt, &opt) == ESPANK_SUCCESS)
		snprintf(opt_s, sizeof(opt_s), "%s", opt ? opt : "");
	env_opt(sp, envo, sizeof(envo));
	clock_gettime(CLOCK_REALTIME, &ts);
	snprintf(line, sizeof(line),
		 "cb=%s ctx=%s job=%u step=%s task=%s nodeid=%s uid=%u euid=%u pid=%d ppid=%d "
		 "mnt=%s freezer=%s memory=%s shm=%d opt=%s envopt=%s t=%lld%s%s\n",
		 cb, ctx_name(), job, step, task, nodeid, (unsigned)getuid(),
		 (unsigned)geteuid(), (int)getpid(), (int)getppid(), mnt, fr, mem,
		 access(shm, F_OK) == 0, opt_s, envo,
		 (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, extra ? " " : "",
		 extra ? extra : "");
	append(line);
}

/* The folder of the log, where daemon pid files go. */
static void log_dir(char *out, size_t len)
{
	char *slash;
	snprintf(out, len, "%s", log_path);
	slash = strrchr(out, '/');
	if (slash)
		*slash = '\0';
}

/* Does the control file ask callback `cb` of step `step` to start a daemon? *join: 0, 1
 * for "join", 2 for "join-step". */
static int wants_daemon(const char *step, const char *cb, int *join)
{
	char line[256], want[128], me[200];
	FILE *f;
	int found = 0;

	if (!ctl_path[0] || !(f = fopen(ctl_path, "r")))
		return 0;
	snprintf(me, sizeof(me), "%s:%s", step, cb);
	while (fgets(line, sizeof(line), f)) {
		char join_word[16] = "";
		if (sscanf(line, "daemon %127s %15s", want, join_word) < 1)
			continue;
		/* STEP:CALLBACK, or *:CALLBACK for any step. */
		if (!strcmp(want, me) || (!strncmp(want, "*:", 2) && !strcmp(want + 2, cb))) {
			found = 1;
			*join = !strcmp(join_word, "join") ? 1 : !strcmp(join_word, "join-step") ? 2 : 0;
		}
	}
	fclose(f);
	return found;
}

/* Enter the job's mount namespace through job_container/tmpfs's holder file. */
static int join_job_ns(uint32_t job, char *how, size_t len)
{
	char path[8192];
	DIR *d;
	struct dirent *e;
	int fd;

	snprintf(how, len, "join=none");
	if (!jc_base[0])
		return -1;
	snprintf(path, sizeof(path), "%s/%u/.ns", jc_base, job);
	if ((fd = open(path, O_RDONLY)) >= 0) {
		if (setns(fd, CLONE_NEWNS) == 0) {
			close(fd);
			snprintf(how, len, "join=%s", path);
			return 0;
		}
		close(fd);
	}
	if (!(d = opendir(jc_base)))
		return -1;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s/%u/.ns", jc_base, e->d_name, job);
		if ((fd = open(path, O_RDONLY)) < 0)
			continue;
		/* Another node's holder is an empty file here: setns refuses it. */
		if (setns(fd, CLONE_NEWNS) == 0) {
			close(fd);
			closedir(d);
			snprintf(how, len, "join=%s", path);
			return 0;
		}
		snprintf(how, len, "join=failed:%s:%s", path, strerror(errno));
		close(fd);
	}
	closedir(d);
	return -1;
}

static void maybe_daemon(spank_t sp, const char *cb)
{
	int join = 0;
	pid_t pid;
	uint32_t job = job_id(sp);
	char step[32];

	step_name(sp, step, sizeof(step));
	if (!wants_daemon(step, cb, &join))
		return;
	pid = fork();
	if (pid < 0)
		return;
	if (pid > 0) {
		waitpid(pid, NULL, 0);
		return;
	}
	/* Child: a new session, then the daemon in a grandchild. */
	setsid();
	if (fork() != 0)
		_exit(0);
	{
		char how[8400] = "join=no", extra[8600], dir[4096], file[8192];
		int fd;
		FILE *f;
		sigset_t blocked;
		unsigned long long mask = 0;

		if (join)
			join_job_ns(job, how, sizeof(how));
		if (join == 2) {
			/* Into the extern step's freezer cgroup (v1), where Slurm's SIGKILL at the
			 * job's end reaches it. */
			char fr[512], procs[1024];
			FILE *cg;
			cgroup_of("freezer", fr, sizeof(fr));
			snprintf(procs, sizeof(procs), "/sys/fs/cgroup/freezer%s/step_extern/cgroup.procs", fr);
			cg = fopen(procs, "w");
			if (cg) {
				fprintf(cg, "%d\n", (int)getpid());
				fclose(cg);
			}
		}
		/* The signals it inherited blocked (SIGTERM among them stops a plain kill). */
		sigprocmask(SIG_BLOCK, NULL, &blocked);
		for (int sig = 1; sig < 64; sig++)
			if (sigismember(&blocked, sig) == 1)
				mask |= 1ULL << (sig - 1);
		snprintf(extra, sizeof(extra), "from=%s:%s %s sigblk=%llx", step, cb, how, mask);
		record(sp, "daemon", extra);
		snprintf(file, sizeof(file), "/dev/shm/colloc-probe-daemon-%u-%s-%s", job, step, cb);
		fd = open(file, O_WRONLY | O_CREAT, 0666);
		if (fd >= 0)
			close(fd);
		log_dir(dir, sizeof(dir));
		snprintf(file, sizeof(file), "%s/daemon-%u-%s-%s-%d.pid", dir, job, step, cb,
			 (int)getpid());
		f = fopen(file, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
			if (fd > 2)
				close(fd);
		}
		execl("/bin/sleep", "sleep", "600", (char *)NULL);
		_exit(127);
	}
}

/* Does process `pid` run (a zombie does not)? */
static int running(int pid)
{
	char path[64], buf[512], *paren;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (pid <= 0 || !(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && paren[2] != 'Z' && paren[2] != 'X';
}

/* The epilog's view of the job's daemons: alive=STEP-CALLBACK-PID:0|1,... */
static void daemons_alive(uint32_t job, char *out, size_t len)
{
	char dir[4096], prefix[64], file[8192];
	DIR *d;
	struct dirent *e;
	size_t used;

	snprintf(out, len, "alive=");
	log_dir(dir, sizeof(dir));
	snprintf(prefix, sizeof(prefix), "daemon-%u-", job);
	if (!(d = opendir(dir)))
		return;
	while ((e = readdir(d))) {
		FILE *f;
		int pid = 0;
		char *dot;

		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
		if (!(f = fopen(file, "r")))
			continue;
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
		dot = strrchr(e->d_name, '.');
		if (dot)
			*dot = '\0';
		used = strlen(out);
		snprintf(out + used, len - used, "%s%s:%d", out[used - 1] == '=' ? "" : ",",
			 e->d_name + strlen(prefix), running(pid));
	}
	closedir(d);
}

static int probe(spank_t sp, int ac, char **av, const char *cb)
{
	parse_args(ac, av);
	record(sp, cb, NULL);
	maybe_daemon(sp, cb);
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	/* Registered in every context, as Slurm needs it for sbatch to know the option. */
	spank_option_register(sp, &mark_opt);
	return probe(sp, ac, av, "init");
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "init_post_opt");
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "local_user_init");
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "user_init");
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "task_init_privileged");
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "task_init");
}

int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "task_post_fork");
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "task_exit");
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "exit");
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "job_prolog");
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	char alive[2048];

	parse_args(ac, av);
	daemons_alive(job_id(sp), alive, sizeof(alive));
	record(sp, "job_epilog", alive);
	maybe_daemon(sp, "job_epilog");
	return 0;
}

int slurm_spank_slurmd_exit(spank_t sp, int ac, char **av)
{
	return probe(sp, ac, av, "slurmd_exit");
}
