package chaos_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/lagmeter"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// The scenario of issue 20.
const (
	procs      = 3
	goroutines = 16 // per process
	keyCount   = 40
	minTTL     = time.Second
	maxTTL     = 2 * time.Second
	minJob     = 300 * time.Millisecond
	maxJob     = 3 * time.Second
	// A fault every minGap to maxGap; none starts later than faultTail
	// before the end of the soak, so that what it does lands in the soak.
	minGap    = 10 * time.Second
	maxGap    = 20 * time.Second
	faultTail = 5 * time.Second
	// nodeTimeout is the cluster's cluster-node-timeout: longer than a
	// master's SIGSTOP (which must not fail it over), short enough that a
	// killed master's replica is promoted within a few seconds.
	nodeTimeout = 2 * time.Second

	// defaultSoak is how long the soak runs; durationEnv overrides it.
	defaultSoak = 90 * time.Second
	durationEnv = "LOCKWATCH_CHAOS_DURATION"
	seedEnv     = "LOCKWATCH_CHAOS_SEED"
	dirEnv      = "LOCKWATCH_CHAOS_DIR"    // keep the journals and logs there
	faultsEnv   = "LOCKWATCH_CHAOS_FAULTS" // only these kinds of fault, comma-separated
	// controlRun is how long the control runs.
	controlRun = 10 * time.Second
	// maxExcerpts bounds the overlaps a failure describes in full.
	maxExcerpts = 10
)

// TestChaos runs the soak of issues 20 and 26 on a Redis Cluster of 3
// masters and 3 replicas: 3 worker processes of 16 goroutines each take 40
// keys with redislock and redsync (TTL 1-2 s), work 0.3-3 s under the
// watchdog's context for the lock and stop at once when it is cancelled,
// while the parent injects a fault every 10-20 s, one of them a partition
// of one worker from every node. Every job's interval goes to its
// process's journal; the checker then finds every two jobs that worked on
// one key at once, and the earlier must have been told of its loss no
// later than the later one obtained the key (else the overlap is LATE,
// or SILENT when it was never told), unless the test had stopped its
// process (SIGSTOP). The control subtest first runs the same workers
// without lockwatch, with jobs that outlive their TTL, and must find
// overlaps: the checker can fail.
func TestChaos(t *testing.T) {
	harness.SkipShort(t, "a 90 s soak of three processes against a Redis Cluster with faults")
	soak := defaultSoak
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive Go duration such as 4m", durationEnv, v)
		}
		soak = d
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(seedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", seedEnv, v)
		}
		seed = s
	}
	t.Logf("seed %d (%s=%d repeats the choices of keys, libraries, TTLs and faults, not their timing); soak %v (%s)", seed, seedEnv, seed, soak, durationEnv)
	lag := lagmeter.Start(t)
	cl := testredis.StartCluster(t, testredis.ClusterOptions{Masters: 3, Replicas: 1, NodeTimeout: nodeTimeout, NoFullCoverage: true})
	t.Cleanup(func() { t.Logf("the parent's worst lateness: %v", lag.Worst()) })

	t.Run("control", func(t *testing.T) {
		r := runPhase(t, cl, phase{name: "control", watch: false, run: controlRun, seed: seed})
		silent := r.count("silent", true) + r.count("silent", false)
		if silent == 0 {
			t.Errorf("control without lockwatch, jobs longer than their TTL: %d overlaps, %d silent; want silent overlaps: the checker cannot see what it is for", len(r.overlaps), silent)
		}
	})
	t.Run("soak", func(t *testing.T) {
		r := runPhase(t, cl, phase{name: "soak", watch: true, run: soak, faults: true, seed: seed + 1})
		if len(r.jobs) == 0 {
			t.Errorf("no job ran")
		}
		for p := range procs {
			if r.summaries[p].Jobs == 0 {
				t.Errorf("worker %d ran no job", p)
			}
		}
	})
}

// phase is one run of the workers.
type phase struct {
	name   string
	watch  bool // lockwatch attached; the control runs without
	run    time.Duration
	faults bool
	seed   uint64
}

// runPhase runs the workers for ph.run (injecting faults if ph.faults),
// lets them finish, checks their journals, logs what it found, and fails
// t on silent overlaps (when lockwatch is attached), malformed journals and
// workers that failed.
func runPhase(t *testing.T, cl *testredis.Cluster, ph phase) *report {
	t.Helper()
	dir := t.TempDir()
	if keep := os.Getenv(dirEnv); keep != "" {
		dir = filepath.Join(keep, fmt.Sprintf("%s-%d", ph.name, time.Now().UnixNano()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("journals and watchdog logs kept in %s (%s)", dir, dirEnv)
	}
	keys := make([]string, keyCount)
	for i := range keys {
		keys[i] = fmt.Sprintf("chaos:%s:%02d", ph.name, i)
	}
	var cfgs []workerConfig
	for p := range procs {
		c := workerConfig{
			Proc: p, Addrs: cl.Addrs(), Keys: keys, Goroutines: goroutines, Watch: ph.watch,
			MinTTL: minTTL, MaxTTL: maxTTL, MinJob: minJob, MaxJob: maxJob,
			Journal: filepath.Join(dir, fmt.Sprintf("journal-%d.jsonl", p)),
			Log:     filepath.Join(dir, fmt.Sprintf("watchdog-%d.log", p)),
			Seed:    ph.seed,
		}
		if !ph.watch {
			// Nothing renews: every job outlives its TTL.
			c.MinJob, c.MaxJob, c.JobPlusTTL = minJob, time.Second, true
		}
		cfgs = append(cfgs, c)
	}
	ps := startWorkers(t, cfgs, ph.run+readyWithin+exitWithin+5*time.Minute)
	in := &injector{cl: cl, workers: ps, rng: rand.New(rand.NewPCG(ph.seed, 0xfa17))}
	begin(t, ps)
	origin := time.Now()
	end := origin.Add(ph.run)
	t.Logf("%s: %d workers x %d goroutines on %d keys for %v, lockwatch %v", ph.name, procs, goroutines, keyCount, ph.run, ph.watch)
	if ph.faults {
		at := origin
		for {
			at = at.Add(minGap + time.Duration(in.rng.Int64N(int64(maxGap-minGap))))
			if at.Add(faultTail).After(end) {
				break
			}
			time.Sleep(time.Until(at))
			n := len(in.faults)
			last := in.inject(t, in.next())
			for i, f := range in.faults[n:] { // a partition fault records one per worker cut off
				t.Logf("fault %d: %s %s %+.3fs..%+.3fs %s", n+i+1, f.kind, f.target, f.from.Sub(origin).Seconds(), f.to.Sub(origin).Seconds(), f.note)
			}
			at = last.to
		}
	}
	time.Sleep(time.Until(end))
	failed := finish(t, ps)
	t.Logf("%s: workers stopped %.1fs after the end of the run (jobs in progress finished)", ph.name, time.Since(end).Seconds())

	faultsPath := filepath.Join(dir, faultsFile)
	if err := writeFaults(faultsPath, in.faults); err != nil {
		t.Errorf("write the faults: %v", err)
	}
	var records []record
	if rs, err := readJournal(faultsPath); err != nil {
		t.Errorf("faults: %v", err)
	} else {
		records = append(records, rs...)
	}
	logs := map[int][]logLine{}
	for _, c := range cfgs {
		rs, err := readJournal(c.Journal)
		if err != nil {
			t.Errorf("journal of worker %d: %v", c.Proc, err)
		}
		records = append(records, rs...)
		if b, err := os.ReadFile(c.Log); err == nil {
			logs[c.Proc] = parseLog(string(b))
		}
	}
	r := check(records)
	t.Logf("%s: %d jobs\n%s", ph.name, len(r.jobs), r.summary())
	for _, f := range failed {
		t.Errorf("%s", f)
	}
	for _, p := range r.problems {
		t.Errorf("journal: %s", p)
	}
	for p, sum := range r.summaries {
		if sum.DirectDials > 0 {
			t.Errorf("worker %d dialed %d connections to addresses no fault proxy stands for: a partition would not cut them", p, sum.DirectDials)
		}
	}

	var silent, late, stalled, explained []overlap
	for _, o := range r.overlaps {
		switch o.verdict {
		case "silent":
			silent = append(silent, o)
		case "late":
			late = append(late, o)
		case "stalled":
			stalled = append(stalled, o)
		default:
			explained = append(explained, o)
		}
	}
	if !ph.watch {
		for i, o := range silent {
			if i == 2 {
				break
			}
			t.Logf("control, overlap %d of %d (expected):\n%s", i+1, len(silent), o.describe(origin, nil, nil))
		}
		return r
	}
	rel := func(at time.Time) string {
		if at.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%+.3fs", at.Sub(origin).Seconds())
	}
	if untold := r.untoldLosses(); len(untold) > 0 {
		// Those with no fault near them first: a fault of every worker's
		// (a master's) or of the job's own process, from its start to a
		// TTL after its end, can explain a release that came too late.
		type untoldJob struct {
			j  *job
			f  fault
			ok bool
		}
		jobs := make([]untoldJob, len(untold))
		faultless := 0
		for i, j := range untold {
			f, ok := faultNear(in.faults, j)
			jobs[i] = untoldJob{j, f, ok}
			if !ok {
				faultless++
			}
		}
		slices.SortStableFunc(jobs, func(a, b untoldJob) int { return cmp.Compare(b2i(a.ok), b2i(b.ok)) })
		var b strings.Builder
		for _, u := range jobs[:min(3, len(jobs))] {
			b.WriteString(u.j.line("job", rel))
			if u.ok {
				fmt.Fprintf(&b, "      near fault %s %s %s..%s\n", u.f.kind, u.f.target, rel(u.f.from), rel(u.f.to))
			} else {
				b.WriteString("      near no fault\n")
			}
		}
		if len(untold) > 3 {
			fmt.Fprintf(&b, "    … and %d more\n", len(untold)-3)
		}
		t.Logf("%d jobs finished untold, and then their release found the lock no longer held (not judged: no other job worked on the key meanwhile, or it would be an overlap); %d of them with no fault of a master or of their process between their start and a TTL after their end:\n%s", len(untold), faultless, b.String())
	}
	for i, o := range explained {
		if i == 3 {
			break
		}
		t.Logf("explained overlap %d of %d:\n%s", i+1, len(explained), o.describe(origin, in.faults, logs))
	}
	for i, o := range stalled {
		if i == maxExcerpts {
			break
		}
		t.Logf("stalled overlap %d of %d (not a failure: its process was not running):\n%s", i+1, len(stalled), o.describe(origin, in.faults, logs))
	}
	if len(silent) > 0 {
		t.Errorf("%d SILENT overlaps (%d within one process, %d across processes): a job kept working on a key another job had taken, and was never told (its process not stopped by the test):\n%s",
			len(silent), r.count("silent", true), r.count("silent", false), excerpts(silent, origin, in.faults, logs))
	}
	if len(late) > 0 {
		// The watchdog cancels a job's context with ErrUnconfirmed no
		// later than E - d (I15): none may be late.
		t.Errorf("%d LATE overlaps (%d within one process, %d across processes; %d after a partition): a job was told it lost its lock only after another job had obtained the key (I15: the job hears it before anyone else can hold the lock), its process not stopped by the test:\n%s",
			len(late), r.count("late", true), r.count("late", false), afterFault(late, in.faults, faultPartition), excerpts(late, origin, in.faults, logs))
	}
	return r
}

// faultsFile is the file, in a phase's directory, the parent writes its
// faults to.
const faultsFile = "faults.jsonl"

// excerpts describes the first maxExcerpts overlaps in full.
func excerpts(ovs []overlap, origin time.Time, faults []fault, logs map[int][]logLine) string {
	var b strings.Builder
	for i, o := range ovs {
		if i == maxExcerpts {
			fmt.Fprintf(&b, "… and %d more\n", len(ovs)-maxExcerpts)
			break
		}
		b.WriteString(o.describe(origin, faults, logs))
	}
	return b.String()
}

// afterFault counts the overlaps whose later job started during a fault of
// kind, or within maxTTL after it.
func afterFault(ovs []overlap, faults []fault, kind string) int {
	n := 0
	for _, o := range ovs {
		for _, f := range faults {
			if f.kind == kind && !o.b.start.Before(f.from) && !o.b.start.After(f.to.Add(maxTTL)) {
				n++
				break
			}
		}
	}
	return n
}

// faultNear returns the first fault that hit every worker (a master's) or
// j's own process between j's start and a TTL after its end, and whether
// there is one.
func faultNear(faults []fault, j *job) (fault, bool) {
	for _, f := range faults {
		if f.proc >= 0 && f.proc != j.proc {
			continue
		}
		if f.to.Before(j.start) || f.from.After(j.end.Add(j.ttl)) {
			continue
		}
		return f, true
	}
	return fault{}, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
