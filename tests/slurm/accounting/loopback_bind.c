/*
 * loopback_bind.so: a preload for the test clusters' slurmdbd (tests/slurm/accounting.sh).
 *
 * slurmdbd listens on every address of the machine: its RPC socket is bound to the
 * wildcard address (slurm_init_msg_engine_port, in 22.05 and 24.11 alike), and
 * slurmdbd.conf has no setting that names the address (DbdAddr is only what others
 * contact; CommunicationParameters=NoInAddrAny binds the address the host name resolves
 * to, which need not be loopback). The test clusters keep to loopback: with this preload a
 * bind to the wildcard address (0.0.0.0, or :: for IPv6) is made on the loopback address
 * of its family instead (127.0.0.1, ::1), same port. Every other bind is left as asked.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	static int (*real_bind)(int, const struct sockaddr *, socklen_t);

	if (!real_bind)
		real_bind = (int (*)(int, const struct sockaddr *, socklen_t))
			dlsym(RTLD_NEXT, "bind");
	if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in in;

		memcpy(&in, addr, sizeof(in));
		if (in.sin_addr.s_addr == htonl(INADDR_ANY)) {
			in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			return real_bind(fd, (const struct sockaddr *)&in, sizeof(in));
		}
	} else if (addr && addr->sa_family == AF_INET6 &&
		   len >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 in6;

		memcpy(&in6, addr, sizeof(in6));
		if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
			in6.sin6_addr = in6addr_loopback;
			return real_bind(fd, (const struct sockaddr *)&in6, sizeof(in6));
		}
	}
	return real_bind(fd, addr, len);
}
