// Package exclusion holds reliability scenarios of lockwatch about who may be
// inside a critical section, and when the watchdog may talk to Redis. It has
// no code of its own: everything is in its tests, which run against a real
// redis-server started by internal/testkit/testredis (they skip without one unless
// LOCKWATCH_REQUIRE_REDIS=1).
//
// # Mutual exclusion under contention
//
// TestMutualExclusionUnderContention runs eight worker processes (the test
// binary, re-executed) that each enter a hundred critical sections over four
// keys with 200 ms locks, and stay inside two to five TTLs. Redis records
// every enter and exit with its own clock. With lockwatch no two workers are
// ever inside the same key's section at once; the same run without lockwatch
// shows overlaps, which proves the check can fail. A lock lost while its
// holder (or Redis) was measurably not scheduled for half a TTL or more is
// excused, up to 5% of the sections: no watchdog renews a 200 ms lock
// through a 200 ms stall of the whole machine.
//
// # Release racing the sweep
//
// TestReleaseRacingSweep obtains and releases ten thousand locks (redislock
// and redsync; with redislock v0.10.0 linked, a quarter of them ObtainMulti
// locks over three keys) while the watchdog sweeps every 10 ms, and reads
// the server's MONITOR stream, where it recognises the release scripts of
// redislock v0.9.4 and v0.10.0 and every layout of the renew script: no
// renewal of a (key, value) reaches Redis after its release has returned, the
// renew script runs nothing but TIME, and MGET, EXISTS and PEXPIRE or
// PEXPIREAT of its own keys,
// no released lock is reported lost, and no lock key is left.
// TestFalseLostOnRelease holds a release's reply back while a sweep runs,
// so that the renewal surely meets the deleted key: the lock must not be
// reported lost.
//
// # Lifecycle
//
// TestLifecycle stops a watchdog with ten thousand tracked locks while a
// sweep is in flight (it returns within a second and leaves no goroutine),
// attaches, stops and attaches again on one registry, and watches a client
// that already served traffic.
//
// # Running
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 ./reliability/exclusion
package exclusion
