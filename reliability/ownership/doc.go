// Package ownership holds reliability scenarios of lockwatch about who
// owns a lock and what user code may do to the watchdog: ownership is key
// and value (invariant I11 of the design), a lock given up is reported to
// its own holder only, and once (I5, I10, I12); user callbacks run outside
// lockwatch's locks and their panics are recovered and counted (I13); the
// holder's context bounds the holder's commands (I3); and one endpoint's
// stall delays no lock on another (I9), for a redis.Ring too. It has no
// code of its own: everything is in its tests, which run against real
// redis-server processes started by internal/testkit/testredis (they skip without
// redis-server unless LOCKWATCH_REQUIRE_REDIS=1).
//
// The tests use lockwatch's public API as an application would:
// registry.New with both adapters, Registry.Watch on each client,
// watchdog.Attach with WithOnLost (recording every call) and WithLogger
// (shown when a test fails), locks obtained through bsm/redislock and
// go-redsync/redsync on go-redis v9, jobs run under wd.Context. What Redis
// holds is read, and keys are deleted, through clients that no registry
// watches. Time bounds add the lateness this process was woken with
// (internal/testkit/lagmeter), so that a busy machine does not fail them.
//
// # Scenarios
//
//   - TestTakenInProcess: A holds K (redislock, 3 s) under wd.Context; an
//     unwatched client deletes K and B, in the same process, takes it at
//     once through the same watched client (redsync, or redislock). A's
//     context is cancelled within 100 ms of B's obtain with ErrLockTaken
//     (matching ErrLost); one OnLost for A's value, none for B's; B's lock
//     is tracked and renewed past its TTL, its own context left running,
//     and A's context does not end at B's release.
//   - TestTakenAfterStall: A holds K (redislock, 1 s) under wd.Context; the
//     server is SIGSTOPped for 1.5 s while another goroutine asks for K with
//     retries and wins after the server continues (B with redislock; or C
//     with redsync while B's redislock retries wait, and keep failing). A
//     is told (ErrLost) within 100 ms of the winner's obtain, once; the
//     winner is never reported while it holds K, for twice its TTL.
//   - TestPanickingFilter: a WithFilter function that panics, with 300 ms
//     locks (the fast lane; the application's next lock commands must
//     return within 1 s) and with 30 s locks and wd.Sweep (no crash):
//     Stats().CallbackPanics > 0. In a child process.
//   - TestPanickingSubscriber: a reg.Subscribe function that panics while
//     locks are obtained, released and lost: no crash, the application's
//     lock commands return normally, the lost lock is reported once,
//     Stats().CallbackPanics > 0. In a child process.
//   - TestNilWatchdog: Stop, Sweep, Context and Stats of a nil *Watchdog do
//     not panic; Sweep and Context's cause match ErrNilWatchdog; Stats is
//     zero.
//   - TestReleaseDuringRenewal: a redislock Release with a 100 ms context,
//     while a renewal of its 40 s lock is in flight and does not answer
//     (held back by a hook, or the server SIGSTOPped), returns within
//     100 ms plus lag plus 50 ms, not at the renewal's timeout (5 s).
//   - TestLostCauseMatchesErrLost: the README's
//     errors.Is(context.Cause(jobCtx), watchdog.ErrLost) holds for a lock
//     given up while its server is SIGSTOPped (ErrUnreachable), and not for
//     ErrMaxHold, ErrReleased and ErrStopped.
//   - TestRingShardStalled: a redis.Ring over two servers with 50 two-second
//     locks on each; one server SIGSTOPped for 8 s: none of the other
//     server's locks may expire or be reported, under the default schedule
//     and under "@every 500ms".
//
// # Child processes
//
// A scenario whose failure may crash or hang the whole process (a panic on
// a watchdog goroutine, a lock left held) re-executes the test binary for
// that one test (-test.run, with LOCKWATCH_OWNERSHIP_CHILD naming it and
// LOCKWATCH_OWNERSHIP_ADDR the redis-server the parent started and stops).
// The parent fails the test with the child's log, the panic and the
// goroutines in lockwatch code when the child crashes, hangs (its
// -test.timeout of 25 s) or fails.
//
// # Running
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -race -count=1 -v ./reliability/ownership/
//
// TestRingShardStalled, which holds locks through an 8 s stall, skips with
// -short.
package ownership
