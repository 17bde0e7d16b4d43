// Package isolation holds reliability scenarios of lockwatch about fault
// isolation (invariant I9 of the design, and I5 and I10 where a fault ends
// in a loss): a stalled, dead, failing-over or migrating Redis endpoint, or
// a slow OnLost callback, must delay no renewal of a lock elsewhere; a lock
// whose key survives a failover must be renewed on its new owner node
// without the application's help; a lock that cannot be kept is reported
// once, with a reason that wraps its cause. It has no code of its own:
// everything is in its tests, which run against real redis-server
// processes (single servers, a Redis Cluster of 3 masters and 3 replicas,
// a master with a replica and a sentinel) started by internal/testkit/testredis;
// they skip without redis-server and redis-cli unless
// LOCKWATCH_REQUIRE_REDIS=1.
//
// The tests use only lockwatch's public API, as an application would:
// registry.New with both adapters, Registry.Watch on each client,
// watchdog.Attach with WithOnLost (recording every report), WithLogger
// (shown when a test fails) and the scenario's options, and locks obtained
// through bsm/redislock and go-redsync/redsync on go-redis v9. What Redis
// holds is read with PTTL and GET through clients that are never watched
// (on a cluster, from the master that serves the slot now, following
// -ASK), every 25 ms.
//
// # Scenarios
//
//   - TestStalledServerDelaysNoOtherServer: two servers watched by one
//     registry (two clients; or one redsync with a pool on each); the first
//     holds a 10 s lock and is SIGSTOPped for 4 s; none of the 50 one-second
//     locks on the second may expire or be reported, and the 10 s lock is
//     renewed again once the first server continues.
//   - TestClusterMasterKilled: 3 masters with a replica each
//     (cluster-node-timeout 1 s, cluster-require-full-coverage no, so that
//     the healthy masters keep answering while a shard has no master); 2 s
//     and 15 s locks on every shard; one master SIGKILLed (its replica is
//     promoted 2-3 s later). Every lock on the healthy masters is kept and
//     none reported; the dead shard's 15 s locks are kept, and renewed on
//     the promoted replica within 3 s of the promotion, without the
//     application calling ReloadState; its 2 s locks may be lost (they
//     expire before the promotion), each reported at most once, none
//     re-created.
//   - TestClusterSlotHalfMigrated: a slot left MIGRATING/IMPORTING with
//     half of its 40 one-second locks moved by MIGRATE, for 5 s: every
//     lock is kept and none is reported.
//   - TestSentinelFailover: a master, a replica (replicating through an
//     in-process proxy, so that its link alone can be cut) and a sentinel;
//     two locks acknowledged by the replica (WAIT) and one written while
//     the link is cut; the master is SIGKILLed, or SENTINEL FAILOVER
//     demotes it, and the sentinel promotes the replica (in under a
//     second): the replicated locks are renewed on the new master within
//     3 s of the promotion, the other is reported once with ErrLockGone
//     and never re-created.
//   - TestSlowOnLostDelaysNoRenewal: OnLost takes 3 s; one of 50 one-second
//     locks is deleted by an intruder: it is reported exactly once, and
//     none of the other 49 expires or is reported.
//   - TestRefreshRacingRenewals: 1000 redislock locks, each refreshed by
//     its holder (300 ms to 30 s, and 3 s to 300 ms) while the watchdog
//     renews them under "@every 10s", "@every 5ms" and "@every 1ms": no
//     key may be left with less TTL than its holder just asked for, nor
//     with more than its new, shorter TTL.
//   - TestClosedClient: a client closed by the application while it has
//     tracked locks: each is reported once with a reason matching both
//     ErrUnreachable and redis.ErrClosed, no command is sent through the
//     client after that, and the locks of another client are kept.
//   - TestLostReasonWrapsCause: locks of 300 ms, 1 s and 2 s that cannot
//     be kept because of a timeout (SIGSTOPped server), a refused
//     connection (killed server) or TRYAGAIN (a miniredis that answers
//     every command with it) are each reported once with ErrUnreachable
//     wrapping that cause.
//   - TestStopWithStalledServer: Stop returns within 2.5 s while a renewal
//     waits on a SIGSTOPped server.
//   - TestAttachRefusesUnworkableSettings: a schedule that never fires, a
//     timeout below 1 ms and a max hold below 1 s are refused by Attach.
//
// # Running
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -v ./reliability/isolation/
//
// The scenarios that need many seconds skip with -short. Failures name
// each lock that was lost (library, key, TTL, node), when its key was found
// gone, the least PTTL seen before, and every OnLost report of it.
package isolation
