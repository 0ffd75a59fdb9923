# Slurm accounting for a test cluster (`cluster.sh start DIR --accounting`); sourced by
# cluster.sh, whose die, log, wait_for, next_port and stop_daemon it uses.
#
# Each cluster gets a database of its own, on loopback only, so that `sacct` and
# `sacctmgr` answer for its jobs:
#   DIR/mariadb/   MariaDB (mariadb-install-db, then mariadbd as root, as the datadir's
#                  owner): data/, mysql.sock, mariadbd.pid, mariadbd.log, install.log.
#                  It listens on 127.0.0.1 and a port of next_port, and on its socket
#                  file; it reads no my.cnf (--no-defaults). Debian's mariadb-server-core
#                  (the server without a service or a system database: nothing of the
#                  machine's starts on installation) and mariadb-client-core. Made here:
#                  the database slurm_acct_db, and the account slurmdbd uses,
#                  slurm@127.0.0.1 with a random password, which may do anything with
#                  that database and nothing else. Not left to slurmdbd to make: where it
#                  is missing, 24.11's slurmdbd with trixie's client library (MariaDB
#                  Connector/C of 11.8) stops at its first query ("5027 Number of columns
#                  in result (=1) set execeeds maxmimum allowed number of columns (=0)",
#                  fatal in _check_mysql_concat_is_sane); seemingly because it makes the
#                  database and connects again on the handle whose connect failed
#                  (mysql_db_get_db_connection in Slurm's src/database/mysql_common.c).
#   DIR/etc/slurmdbd.conf   mode 0600, owned by SlurmUser (root): slurmdbd reads it from
#                  the folder of $SLURM_CONF (Slurm's get_extra_conf_path), beside
#                  slurm.conf; DbdHost=localhost, DbdAddr=127.0.0.1, a DbdPort of
#                  next_port, AuthInfo=socket= the cluster's munged.
#   DIR/slurmdbd/  slurmdbd.pid, slurmdbd.log. slurmdbd binds its RPC socket to the
#                  wildcard address whatever slurmdbd.conf says: it runs with the preload
#                  accounting/loopback_bind.c (built here into DIR/bin with $CC, else
#                  gcc), which binds it to 127.0.0.1 instead.
# slurm.conf then has AccountingStorageType=accounting_storage/slurmdbd on
# 127.0.0.1:DbdPort, and AccountingStoragePass=socket= the cluster's munged: Slurm's
# clients of slurmdbd (slurmctld, sacct, sacctmgr) take the munge socket for those
# messages from AccountingStoragePass, not AuthInfo (_global_auth_key in Slurm's
# slurm_protocol_api.c), and would otherwise ask the machine's default munged. No
# AccountingStorageEnforce: jobs of users without an association run and are recorded
# (with no account). slurmctld adds the cluster to the database itself when it first
# registers (proc_req.c _register_ctld, 22.05 and 24.11); start waits until it has.
# stop stops slurmdbd and then mariadbd (after slurmctld, before munged), each waited for;
# removing DIR removes the data.

ACCOUNTING_PACKAGES=(mariadb-server-core mariadb-client-core slurmdbd)
ACCOUNTING_DB=slurm_acct_db
# MariaDB for a throw-away test database: small, and nothing waits on the disk (a cluster
# that stops loses nothing it needs). The loose- options are ones a later MariaDB (11.x in
# the 24.11 root) may have dropped: ignored there rather than refused. slurmdbd logs
# "error: Database settings not recommended values: innodb_buffer_pool_size
# innodb_log_file_size" at its start (it asks for 1 GiB and 64 MiB, for production):
# expected here, and harmless; its innodb_lock_wait_timeout of 900 s is taken.
ACCOUNTING_MARIADB_OPTS=(--skip-name-resolve --skip-log-bin --innodb-buffer-pool-size=64M
  --innodb-log-file-size=16M --innodb-lock-wait-timeout=900
  --loose-innodb-flush-log-at-trx-commit=0 --loose-innodb-doublewrite=0
  --loose-innodb-flush-method=nosync --loose-innodb-buffer-pool-dump-at-shutdown=0
  --loose-innodb-buffer-pool-load-at-startup=0)

# Whether the programs accounting needs are here.
accounting_have_programs() {
  local p
  for p in mariadbd mariadb-install-db mariadb slurmdbd sacctmgr sacct; do
    command -v "$p" >/dev/null || return 1
  done
}

# Pick the ports of the cluster in $1 (ACCOUNTING_DB_PORT, ACCOUNTING_DBD_PORT) and set
# ACCOUNTING_SLURM_CONF to slurm.conf's accounting lines. Not in a subshell: next_port
# keeps the ports the cluster took.
accounting_configure() {
  local dir=$1 port
  next_port
  ACCOUNTING_DB_PORT=$port
  next_port
  ACCOUNTING_DBD_PORT=$port
  ACCOUNTING_SLURM_CONF="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$ACCOUNTING_DBD_PORT
AccountingStoragePass=socket=$dir/munge/munge.socket"
}

# Run SQL $2 as MariaDB's root (unix_socket authentication: this script runs as root) on
# the socket of the cluster in $1.
accounting_sql() {
  mariadb --no-defaults --protocol=socket --socket="$1/mariadb/mysql.sock" -u root -e "$2"
}

# Start MariaDB and slurmdbd for the cluster in $1 (after its munged, before slurmctld;
# SLURM_CONF is set), after accounting_configure.
accounting_start() {
  local dir=$1 db=$1/mariadb pass
  mkdir -p "$db" "$dir/slurmdbd" "$dir/bin"
  mariadb-install-db --no-defaults --datadir="$db/data" --user=root \
    --auth-root-authentication-method=socket --skip-test-db "${ACCOUNTING_MARIADB_OPTS[@]}" \
    >"$db/install.log" 2>&1 || die "mariadb-install-db failed (see $db/install.log)"
  # Its own session, as a daemon: the caller's terminal and pipes are not its.
  setsid mariadbd --no-defaults --user=root --datadir="$db/data" --bind-address=127.0.0.1 \
    --port="$ACCOUNTING_DB_PORT" --socket="$db/mysql.sock" --pid-file="$db/mariadbd.pid" \
    --log-error="$db/mariadbd.log" "${ACCOUNTING_MARIADB_OPTS[@]}" </dev/null >>"$db/mariadbd.log" 2>&1 &
  # Ours until mariadbd writes it (the same number): stop finds it even if it never did.
  echo $! >"$db/mariadbd.pid"
  wait_for 300 accounting_sql "$dir" 'SELECT 1' ||
    die "MariaDB did not come up on $db/mysql.sock (see $db/mariadbd.log)"
  pass=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  accounting_sql "$dir" "CREATE DATABASE $ACCOUNTING_DB;
CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
GRANT ALL ON $ACCOUNTING_DB.* TO 'slurm'@'127.0.0.1';" ||
    die "cannot make MariaDB's account for slurmdbd"

  (
    umask 077
    cat >"$dir/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$ACCOUNTING_DBD_PORT
SlurmUser=root
DebugLevel=info
LogFile=$dir/slurmdbd/slurmdbd.log
PidFile=$dir/slurmdbd/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$ACCOUNTING_DB_PORT
StorageUser=slurm
StoragePass=$pass
StorageLoc=$ACCOUNTING_DB
EOF
  )
  chown root:root "$dir/etc/slurmdbd.conf"
  chmod 0600 "$dir/etc/slurmdbd.conf"

  local preload=$dir/bin/loopback_bind.so
  "${CC:-gcc}" -O2 -Wall -shared -fPIC -o "$preload" "$here/accounting/loopback_bind.c" -ldl ||
    die "--accounting: cannot build $here/accounting/loopback_bind.c (set CC)"
  # slurmdbd reads slurmdbd.conf from $SLURM_CONF's folder, and daemonizes.
  LD_PRELOAD=$preload slurmdbd || die "slurmdbd did not start (see $dir/slurmdbd/slurmdbd.log)"
  wait_for 300 sacctmgr -n list cluster ||
    die "slurmdbd did not answer on 127.0.0.1:$ACCOUNTING_DBD_PORT (see $dir/slurmdbd/slurmdbd.log)"
}

# Wait until slurmctld registered the cluster in $1 with slurmdbd (it adds the cluster to
# the database then): before that, slurmdbd turns its job records away.
accounting_wait_registered() {
  local dir=$1
  # shellcheck disable=SC2016 # expanded by that sh, at each try
  wait_for 300 sh -c 'sacctmgr -n -P list cluster format=cluster,controlhost | grep -qx "$0|127.0.0.1"' \
    "$(sed -n 's/^ClusterName=//p' "$dir/etc/slurm.conf")" ||
    die "slurmctld did not register with slurmdbd (see $dir/slurm/slurmctld.log, $dir/slurmdbd/slurmdbd.log)"
}

# Stop slurmdbd and MariaDB of the cluster in $1 (nothing when it has none), each waited for.
accounting_stop() {
  local dir=$1
  stop_daemon "$dir/slurmdbd/slurmdbd.pid"
  stop_daemon "$dir/mariadb/mariadbd.pid"
}
