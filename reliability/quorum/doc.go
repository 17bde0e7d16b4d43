// Package quorum holds reliability scenarios of lockwatch about redsync
// mutexes over several Redis servers (Redlock: invariants I5 and I10 of the
// design, a mutex over several pools is one lock) and about the context
// Watchdog.Context hands out for a lock. It has no code of its own:
// everything is in its tests, which run against real redis-server
// processes started by internal/testkit/testredis, each test on servers of its own
// (free loopback ports); they skip without redis-server unless
// LOCKWATCH_REQUIRE_REDIS=1.
//
// The tests use lockwatch's public API as an application would:
// registry.New with both adapters, Registry.Watch on every client (one
// go-redis v9 client per server), watchdog.Attach with WithOnLost
// (recording each call, whether the lock's context had already ended, and
// optionally blocking), WithLogger (shown when a test fails) and an
// Observer that records CopyLost; locks obtained through bsm/redislock and
// go-redsync/redsync (redsync.New with one goredis pool per server,
// WithExpiry(1s), WithTimeoutFactor(0.5)). Every lock has a TTL of 1 s, so
// the fast lane renews it every third of a second. What the servers hold is
// read every 25 ms through clients nobody watches (GET and PTTL in one
// MULTI). "Another process" is a redsync of its own, on clients of its own,
// never watched.
//
// # Scenarios
//
//   - TestRedlockServersKilled: a mutex over 3 and over 5 servers; servers
//     SIGKILLed one by one. While a majority holds it, each dead server's
//     copy is given up as a copy (CopyLost, n-1, n-2... held, n/2+1 needed,
//     ErrUnreachable) within a TTL, OnLost is not called, the context
//     lives, the live copies' PTTL never falls under TTL/3, and another
//     process cannot take the mutex. The kill that leaves fewer than a
//     majority (2 of 3, 3 of 5) loses it: the context is cancelled within a
//     TTL with an error matching ErrQuorumLost, ErrLost, ErrUnreachable and
//     ECONNREFUSED and naming the killed server; OnLost gets that very
//     error exactly once, after the context ended; the copies left are
//     renewed no more (their PTTL only falls) and are gone within a TTL;
//     another process over the servers left takes the mutex within a TTL;
//     nothing is re-created or tracked; the holder's late Unlock answers
//     false and reports nothing.
//   - TestRedlockCopiesDeletedOrOverwritten: an intruder DELetes the key,
//     or SETs its own value, on 2 of 5 (1 of 3) servers: not lost, as
//     above, and the intruder's key is never renewed; then the holder's
//     Unlock (ErrReleased, no key left, nothing reported). On 3 of 5 (2 of
//     3): lost, as above, within a renewal period, the error wrapping
//     ErrLockGone or ErrLockTaken.
//   - TestRedlockUnlock: over 3 and 5 servers, also after a copy was
//     deleted and after 2 of 5 servers were killed: Unlock answers true;
//     the context is cancelled with ErrReleased by the time it returns; no
//     server holds the key; nothing comes back, is tracked or reported.
//   - TestRedlockQuorumCountsServersAtAcquire: a mutex over 5 servers
//     obtained while 2 are down, or while another holder has the key on 2
//     (their nil replies forced to reach the registry after, or before, the
//     successful SET NX: the others are SIGSTOPped for 150 ms): 3 copies,
//     3 needed; losing one more loses the mutex, and the other holder's
//     keys are never touched.
//   - TestRedlockHolderExtend: the holder's own Extend meets copies an
//     intruder deleted a moment before: with 1 of 5 gone (Extend answers
//     true) the mutex is held and its context lives; with 3 of 5 gone
//     (Extend answers false) the 2 copies left are renewed no more, so
//     that another process takes the mutex within a TTL.
//   - TestQuorumLostErrorCounts: the error of a lost mutex says how many
//     servers held it when the quorum was lost ("2 of 5 servers hold it, 3
//     needed").
//   - TestContextCauses: for a redislock lock and a redsync mutex, with an
//     OnLost that blocks 3 s, the context is cancelled, within its bound of
//     the event, with the cause: deleted (ErrLockGone, a renewal period),
//     stolen (ErrLockTaken), server SIGSTOPped (ErrUnreachable wrapping a
//     timeout, a TTL) or SIGKILLed (wrapping ECONNREFUSED), max hold
//     (ErrMaxHold a second after the obtain, the key then expiring), held
//     released (ErrReleased, by the time the release returns), watchdog
//     stopped (ErrStopped, by the time Stop returns, the key then
//     expiring), never tracked (ErrNotTracked before Context returns: a key
//     never obtained, one held through an unwatched client, one released).
//     For a loss OnLost gets the very error of the cause, after the context
//     ended. "slow OnLost": while OnLost blocks on a first lock, a second
//     lock's context is still cancelled within a renewal period of its
//     deletion.
//
// # Running
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -v ./reliability/quorum/
//
// The scenarios run side by side (t.Run from several goroutines: they
// spend their time sleeping), about 20 s in all; the long ones skip with
// -short. Timing bounds are the scenario's (a renewal period, a TTL) plus
// 300 ms and the lateness of this process's goroutines measured by
// internal/testkit/lagmeter. A failing scenario logs what it saw: each server's
// readings run by run (holder's value with its PTTL range, absent, another
// value, unreadable), the context's cause and when it ended, every OnLost
// and CopyLost call with its time, and the watchdog's log.
package quorum
