// Package chaos holds the chaos soak of lockwatch (issue 20): several
// processes take the same keys with bsm/redislock and go-redsync/redsync
// on a Redis Cluster while masters stall, die and fail over, connections
// are killed and worker processes are stopped, and a checker reads what
// every job did and finds every two jobs that worked on one key at once.
// It has no code of its own: everything is in its tests, which run
// against real redis-server processes started by internal/testkit/testredis (they
// skip without redis-server and redis-cli unless LOCKWATCH_REQUIRE_REDIS=1,
// and with -short).
//
// # The soak
//
// TestChaos starts a Redis Cluster of 3 masters and 3 replicas
// (cluster-node-timeout 2 s, cluster-require-full-coverage no) and 3 worker
// processes: the test binary re-executed to run TestHelperWorker with
// LOCKWATCH_CHAOS_WORKER set. Each worker is an application as the README's
// quick start has it: its own go-redis ClusterClient, registry.New with
// both adapters, Registry.Watch, watchdog.Attach with the default schedule,
// an OnLost that journals and logs, and a logger. Its 16 goroutines take
// one of 40 keys at a time (redislock or redsync, at random; TTL 1-2 s, so
// that the watchdog must renew), work 0.3-3 s under
// jobCtx, cancel := wd.Context(ctx, key), stop at once when jobCtx is
// cancelled, and release. Every 10-20 s the parent injects one fault, each
// kind in turn in a shuffled order: a master SIGSTOPped for 1.5 s; a master
// SIGKILLed, waiting for its replica's promotion (only a master with a live
// replica is killed; the dead node is not restarted); CLIENT KILL TYPE
// normal on every node; a worker process SIGSTOPped for 0.5 s.
//
// # The journal and the checker
//
// Each worker journals, one JSON line at a time with its own write, to a
// file of the test's temporary directory: a job's start (key, owner
// "p<process>.g<goroutine>.s<seq>", library, the value stored under the
// key, TTL) as soon as it obtained its key; its end once it stopped
// working (when its context was cancelled before the work was done, the
// time and context.Cause, and then the release's error); every OnLost call
// (key, value, reason); and the lateness of the process's lag meter
// (internal/testkit/lagmeter) when it is 10 ms or more. Times are the wall clock:
// all processes run on one machine.
//
// The checker reads every journal and finds every two jobs on one key
// whose intervals overlap: the later one started while the earlier one
// was working. An overlap is EXPLAINED when the earlier job was told of
// its loss (its context cancelled with a loss reason, that is one of
// ErrLockTaken, ErrLockGone, ErrUnreachable, ErrMaxHold, ErrQuorumLost or
// anything matching ErrLost; or OnLost called for its key and value) no
// later than 100 ms after the later job started. The only slack is the
// time the earlier job's own process was not running in between, as its
// lag meter measured it (every lateness of 10 ms or more, journaled every
// 20 ms): a process that does not run cannot be told sooner. An overlap
// is STALLED when the earlier job was not told in time but its process was
// not running when the later job started, and it ended within the same
// allowance: its lock expired while its process stood still, which no
// watchdog can prevent (invariant I2 holds while the holder runs), and it
// stopped as soon as it ran again. Every other overlap is SILENT. Overlaps
// within one process (the case of the issue: a job went on working after
// another job of its own process had taken its key, and was never told)
// and across processes are counted apart. The soak fails on any silent
// overlap, and describes each (both jobs, the last fault before, the
// watchdog logs of both processes); stalled ones are described in the log.
// It also counts, without judging them, the jobs that finished untold but
// whose release found their lock no longer held.
//
// The control subtest first runs the same workers for 10 s without
// lockwatch (no registry, no watchdog, no job context) and with jobs
// longer than their TTL: it must find silent overlaps, or the checker
// cannot see what it is for. TestChaosCheck runs the checker on made-up
// journals.
//
// No other wall-clock bound is asserted: the waits for the cluster, the
// workers and a promotion are hang guards of a minute.
//
// # Running
//
//	LOCKWATCH_REQUIRE_REDIS=1 go test -count=1 -run TestChaos -v ./reliability/chaos
//
// takes about two minutes (cluster start, a 10 s control, a 90 s soak,
// each followed by the jobs in progress). By hand,
// LOCKWATCH_CHAOS_DURATION=4m runs the soak for four minutes,
// LOCKWATCH_CHAOS_SEED repeats a run's random choices (not its timing),
// LOCKWATCH_CHAOS_DIR=dir keeps the journals and watchdog logs there, and
// LOCKWATCH_CHAOS_REPLAY=dir/soak-... go test -run TestReplayJournals
// checks kept journals again.
package chaos
