// Package chaos holds the chaos soak of lockwatch (issues 20 and 26):
// several processes take the same keys with bsm/redislock and
// go-redsync/redsync on a Redis Cluster while masters stall, die and fail
// over, connections are killed, worker processes are stopped or cut off
// from the cluster, and a checker reads what every job did and finds
// every two jobs that worked on one key at once. It has no code of its
// own: everything is in its tests, which run against real redis-server
// processes started by internal/testkit/testredis (they skip without
// redis-server and redis-cli unless LOCKWATCH_REQUIRE_REDIS=1, and with
// -short).
//
// # The soak
//
// TestChaos starts a Redis Cluster of 3 masters and 3 replicas
// (cluster-node-timeout 2 s, cluster-require-full-coverage no) and 3 worker
// processes: the test binary re-executed to run TestHelperWorker with
// LOCKWATCH_CHAOS_WORKER set. Each worker is an application as the README's
// quick start has it: its own go-redis ClusterClient, registry.New with
// both adapters, Registry.Watch, watchdog.Attach with the default schedule,
// an OnLost that journals and logs, and a logger. Its cluster client
// reaches every node through a fault proxy of its own
// (internal/testkit/faultproxy, one per node, in the worker process): the
// client's Dialer connects to the proxy of the node address it is asked
// for, so that the cluster's own addresses (CLUSTER SLOTS, MOVED, ASK)
// keep working, and a dial of an address no proxy stands for is counted
// and fails the soak. Its 16 goroutines take one of 40 keys at a time
// (redislock or redsync, at random; TTL 1-2 s, so that the watchdog must
// renew), work 0.3-3 s under jobCtx, cancel := wd.Context(ctx, key), stop
// at once when jobCtx is cancelled, and release. Every 10-20 s the parent
// injects one fault, each kind in turn in a shuffled order (the first
// round begins with a partition): a master SIGSTOPped for 1.5 s; a master
// SIGKILLed, waiting for its replica's promotion (only a master with a
// live replica is killed; the dead node is not restarted); CLIENT KILL
// TYPE normal on every node; a worker process SIGSTOPped for 0.5 s; a
// worker partitioned, then another: told on its standard input
// ("partition 3s"), a worker blackholes every one of its proxies for 3 s,
// longer than any TTL (its connections stay open and forward nothing
// either way, as a network that loses packets), and heals on its own;
// meanwhile the other workers contend for every key ("contend 3s"): every
// 2 ms they read whether each key exists and try at once to obtain each
// one found free, as a client waiting for the key would (each key so
// obtained is a job like any other), so that the cut-off worker's keys
// are taken within milliseconds of their expiry. (Only a job that
// outlives its lock's expiry is told at all: a few of the sixteen a
// worker runs; hence two workers.) The parent writes every fault, with
// the worker it hit, to faults.jsonl beside the journals.
//
// # The journal and the checker
//
// Each worker journals, one JSON line at a time with its own write, to a
// file of the test's temporary directory: a job's start (key, owner
// "p<process>.g<goroutine>.s<seq>", library, the value stored under the
// key, TTL) as soon as it obtained its key; its end once it stopped
// working (when its context was cancelled before the work was done, the
// time and context.Cause, and then the release's error); every OnLost call
// (key, value, reason); and the lateness of the process's lag meters
// (internal/testkit/lagmeter) when it is 10 ms or more: how late a
// goroutine is woken, and how long any thread of the process waited for
// a CPU without running (a thread the host leaves off the CPUs keeps its
// goroutine and any lock that goroutine holds, such as the table lock
// every pass of the watchdog's scheduler takes, while a goroutine on
// another thread is woken on time), and how late the watchdog's
// scheduler woke whenever it told a holder after its lock's deadline (its
// own Warn line). Times are the wall clock:
// all processes run on one machine.
//
// The checker reads every journal and the faults, and finds every two
// jobs on one key whose intervals overlap: the later one started while
// the earlier one was working. The rule (invariant I15: the job hears
// "may be lost" before anyone else can take the key): the earlier job
// must have been told of its loss (its context cancelled with a loss
// reason, that is one of ErrLockTaken, ErrLockGone, ErrUnreachable,
// ErrMaxHold, ErrQuorumLost or anything matching ErrLost; or OnLost
// called for its key and value) no later than the instant the later job
// obtained the key. An overlap is EXPLAINED when it was (the overlap is
// then the time the job took to stop); LATE when it was told, but after
// the later job had obtained the key, however little after (the lag the
// earlier process's lag meter measured in between is reported); SILENT
// when it was never told. The one excuse is the fencing limit, a holder
// whose own process stood still: an overlap is STALLED when the earlier
// job's process was stopped by the parent (SIGSTOP) at some time within
// the earlier lock's TTL before the later start, and the earlier job was
// told, or ended, no later than 100 ms after the later of that start and
// the end of the stop; or when its own lag meters measured it, or one of
// its threads, not running (its host did not run it: a loaded machine,
// or a frozen virtual CPU, which this project's machine showed as a
// kernel "workqueue lockup" of 37-68 s) for at least as long as it was late, between a quarter of its
// TTL (the most a tell is moved forward) before the later start and its
// telling or end. Either way its lock expired while its process stood
// still, which no watchdog can prevent, and had it run it would have been
// told in time. A stall shorter than the lateness excuses nothing.
// A partition excuses nothing: a cut-off holder's watchdog knows it
// cannot confirm a renewal, and must tell its jobs before their keys can
// expire. Overlaps within one process (the case of issue 20: a job went
// on working after another job of its own process had taken its key, and
// was never told) and across processes are counted apart. The soak fails
// on any silent or late overlap, and describes each (both jobs, the last
// fault before, the watchdog logs of both processes, how many late ones
// began during a partition or within a TTL after it); stalled ones are
// described in the log. It also counts, without judging them, the jobs
// that finished untold but whose release found their lock no longer held.
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
// LOCKWATCH_CHAOS_DIR=dir keeps the journals, the faults and the watchdog
// logs there, LOCKWATCH_CHAOS_FAULTS=worker-partition (kinds,
// comma-separated) injects only those faults, and LOCKWATCH_CHAOS_REPLAY=dir/soak-... go test -run
// TestReplayJournals checks kept journals (and their faults) again.
package chaos
