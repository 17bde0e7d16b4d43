// Package faults holds reliability scenarios of lockwatch under network
// faults and Redis restarts. It has no code of its own: everything is in its
// tests, which run against a real redis-server started by internal/testkit/testredis
// (they skip without one unless LOCKWATCH_REQUIRE_REDIS=1).
//
// In every scenario the application's client is watched by a registry with
// both adapters and a watchdog attached on the schedule "@every 1s" (the
// fast lane renews the short locks between ticks); locks are obtained
// through bsm/redislock and go-redsync/redsync on that client. A second
// client, never watched and connected to the server directly, looks at the
// keys every 10 ms.
//
// # Network faults
//
// The watched client reaches the server through internal/testkit/faultproxy, an
// in-process TCP proxy. Each scenario runs twice: with 1 s socket timeouts,
// and with ContextTimeoutEnabled.
//
//   - TestNetworkFaultsLatency: 20 ms each way; 1.5 s and 3 s locks stay
//     held for 3 s with a third of their TTL, are renewed, none is lost.
//   - TestNetworkFaultsShortBlackhole: nothing forwarded for 600 ms, less
//     than any lock has left: the locks never leave the server, renewals
//     fail meanwhile and resume on their own, none is lost.
//   - TestNetworkFaultsShortBlackholeAtTheBound: the same, started once
//     the locks have only as much left as that bound allows, so that a
//     1.5 s lock's renewal and its hedge both fall in the outage. It
//     fails on main (an open flaw) and skips, saying so.
//   - TestNetworkFaultsLongBlackhole: nothing forwarded for 1.5 s, longer
//     than the 300 and 500 ms locks, shorter than the 4 s ones: the short
//     locks are reported with ErrUnreachable once their TTL since the last
//     confirmed renewal has passed, untracked, and never renewed or
//     re-created (one is taken by another client during the outage and keeps
//     that client's value and expiry); the long ones survive and are renewed
//     again.
//   - TestNetworkFaultsResets: every connection reset (RST) six times,
//     250 ms apart: go-redis reconnects, renewal continues, none is lost.
//
// # A partitioned holder, late answers
//
//   - TestPartitionedHolder (issue 26 items 3 and 7, I15): 40 redislock
//     locks of 1 s, or 40 redsync mutexes of 2 s, held through the proxy
//     under the default schedule, each with a wd.Context; a contender on
//     a client of its own tries every key every 2 ms with a raw SET NX.
//     The proxy then cuts the holder off (blackhole, or every connection
//     reset every 3 ms) for longer than the TTL. Every job context must be
//     cancelled, with a cause matching ErrLost, before the contender's last
//     failed SET NX was sent: before anyone else could take the key.
//   - TestLateAnswerCause (issue 26 item 6, I12): renewals answered a
//     round trip of 0.4 to 0.8 TTL late, while another client deletes or
//     overwrites the keys: OnLost says ErrLockGone or ErrLockTaken, never
//     ErrUnreachable, and no lock is given up while Redis still holds it.
//
// # Redis restarts
//
//   - TestRedisRestartWithoutPersistence: restart on the same port, at once
//     or after 600 ms down: every lock is reported lost once (ErrLockGone,
//     or ErrUnreachable when no renewal could be confirmed within its TTL)
//     and untracked, no key comes back, and a lock obtained afterwards is
//     tracked and renewed.
//   - TestRedisRestartWithAppendOnly: appendonly yes, appendfsync always;
//     restart after SIGTERM, SIGKILL, or SIGKILL and 500 ms down: the keys
//     come back, renewal resumes (the watchdog answers NOSCRIPT with the
//     script's source), none is lost.
//
// # Running
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -v ./reliability/faults
//
// Each test logs its figures (renewals, least TTL seen, how late losses were
// reported, how long renewals took to resume, the scheduling lag of the test
// process) with -v.
package faults
