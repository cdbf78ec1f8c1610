#!/usr/bin/env bash
# Start/stop a private Redis and PostgreSQL on loopback for the tests.
#   eval "$(scripts/test_services.sh start DIR)"   prints the env vars the tests read
#   scripts/test_services.sh stop DIR
set -euo pipefail
action=$1
dir=$2
redis_port=${KJ_TEST_REDIS_PORT:-6391}
pg_port=${KJ_TEST_PG_PORT:-5441}
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

case "$action" in
start)
    redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >&2
    mkdir -p "$dir/pg"
    [ "$(id -u)" = 0 ] && chown postgres "$dir" "$dir/pg"
    as_pg "$pg_bin/initdb" -D "$dir/pg" -U postgres --auth=trust >/dev/null
    as_pg "$pg_bin/pg_ctl" -D "$dir/pg" -l "$dir/pg.log" -w \
        -o "-p $pg_port -k $dir -c listen_addresses=127.0.0.1" start >/dev/null
    as_pg "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U postgres kerneljudge_test
    # Wait on the real condition (the server answers), not on a sleep.
    for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; done
    echo "export KERNELJUDGE_TEST_REDIS_URL=redis://127.0.0.1:$redis_port/0"
    echo "export KERNELJUDGE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:$pg_port/kerneljudge_test"
    ;;
stop)
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    [ -d "$dir/pg" ] && as_pg "$pg_bin/pg_ctl" -D "$dir/pg" -m immediate stop >/dev/null 2>&1 || true
    ;;
esac
