package chaos_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// The faults of the soak, one at a time.
const (
	faultMasterPause = "master-sigstop" // a master SIGSTOPped for masterPause
	faultMasterKill  = "master-sigkill" // a master SIGKILLed; its replica promoted
	faultClientKill  = "client-kill"    // CLIENT KILL TYPE normal on every node
	faultWorkerPause = "worker-sigstop" // a worker process SIGSTOPped for workerPause
	// faultPartition cuts one worker process off from every cluster node
	// for partitionFor, then another: its fault proxies (one per node, in the worker;
	// see worker.dial) forward nothing either way, as a network partition
	// whose packets are lost, and then heal, while the other workers
	// contend for every key (worker.contend). Its watchdog must tell each
	// of its jobs before another process can take the job's key (I15).
	faultPartition = "worker-partition"
)

var faultKinds = []string{faultMasterPause, faultMasterKill, faultClientKill, faultWorkerPause, faultPartition}

const (
	masterPause = 1500 * time.Millisecond
	workerPause = 500 * time.Millisecond
	// partitionFor is longer than any lock's TTL (maxTTL): every lock the
	// cut-off worker holds expires on the servers, and the other workers
	// take the keys. A partition fault cuts off partitioned workers, one
	// after the other.
	partitionFor = maxTTL + time.Second
	partitioned  = 2
	// promotionWithin is a hang guard: a replica is promoted about
	// NodeTimeout plus one or two seconds after its master dies.
	promotionWithin = 60 * time.Second
)

// injector injects the soak's faults into a cluster and the worker
// processes, and records them.
type injector struct {
	cl      *testredis.Cluster
	workers []*workerProc
	rng     *rand.Rand
	faults  []fault
	order   []string // the kinds still to come, a shuffled round of all of them
	rounds  int      // rounds of kinds begun
}

// next picks the next kind: every kind once in a shuffled round, then
// another round, so that a short soak still sees each. The first round
// starts with a partition, which a 90 s soak (four or five faults) would
// otherwise miss one time in five.
func (in *injector) next() string {
	if len(in.order) == 0 {
		in.order = append([]string(nil), faultKinds...)
		if only := os.Getenv(faultsEnv); only != "" {
			in.order = strings.Split(only, ",")
		}
		in.rng.Shuffle(len(in.order), func(i, j int) { in.order[i], in.order[j] = in.order[j], in.order[i] })
		if in.rounds == 0 {
			if i := slices.Index(in.order, faultPartition); i >= 0 {
				in.order[0], in.order[i] = in.order[i], in.order[0]
			}
		}
		in.rounds++
	}
	k := in.order[0]
	in.order = in.order[1:]
	return k
}

// inject runs one fault of kind to its end (a pause resumed, a promotion
// seen) and records it.
func (in *injector) inject(t *testing.T, kind string) fault {
	t.Helper()
	f := fault{kind: kind, proc: -1, from: time.Now()}
	switch kind {
	case faultMasterKill:
		if !in.killMaster(t, &f) {
			f = fault{kind: faultMasterPause, proc: -1, from: time.Now(), note: "(instead of a SIGKILL: no master has a replica left)"}
			in.pauseMaster(t, &f)
		}
	case faultMasterPause:
		in.pauseMaster(t, &f)
	case faultClientKill:
		in.clientKill(t, &f)
	case faultWorkerPause:
		p := in.workers[in.rng.IntN(len(in.workers))]
		f.target, f.proc = fmt.Sprintf("worker process %d", p.cfg.Proc), p.cfg.Proc
		f.from = time.Now()
		if err := p.pause(); err != nil {
			t.Fatalf("SIGSTOP worker %d: %v", p.cfg.Proc, err)
		}
		time.Sleep(workerPause)
		if err := p.resume(); err != nil {
			t.Fatalf("SIGCONT worker %d: %v", p.cfg.Proc, err)
		}
		f.to = time.Now()
	case faultPartition:
		// Two workers in turn: only a job that outlives its lock's expiry
		// is told at all, a few of the cut-off worker's sixteen.
		ps := slices.Clone(in.workers)
		in.rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		for i, p := range ps[:min(partitioned, len(ps))] {
			if i > 0 {
				in.faults = append(in.faults, f)
				f = fault{kind: kind, proc: -1}
			}
			in.partition(t, &f, p)
		}
	default:
		t.Fatalf("unknown fault %q", kind)
	}
	if f.to.IsZero() {
		f.to = time.Now()
	}
	in.faults = append(in.faults, f)
	return f
}

// partition cuts worker p off from every node for partitionFor, the other
// workers contending for every key meanwhile, and waits until it heals.
func (in *injector) partition(t *testing.T, f *fault, p *workerProc) {
	t.Helper()
	f.target, f.proc = fmt.Sprintf("worker process %d", p.cfg.Proc), p.cfg.Proc
	for _, o := range in.workers {
		if o != p {
			if err := o.contend(partitionFor); err != nil {
				t.Fatalf("contend, worker %d: %v", o.cfg.Proc, err)
			}
		}
	}
	f.from = time.Now()
	if err := p.partition(partitionFor); err != nil {
		t.Fatalf("partition worker %d: %v", p.cfg.Proc, err)
	}
	// The worker heals on its own after partitionFor; wait for it.
	time.Sleep(partitionFor)
	f.to = time.Now()
	f.note = fmt.Sprintf("(blackholed %v: every connection to every node forwards nothing; the other workers contend for every key every %v meanwhile)", partitionFor, contendEvery)
}

// liveMasters returns the masters that serve slots and whose process runs.
func (in *injector) liveMasters(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, m := range in.cl.Masters(t) {
		if s := in.cl.Server(m); s != nil && s.Running() && !s.Paused() {
			out = append(out, m)
		}
	}
	return out
}

func (in *injector) pauseMaster(t *testing.T, f *fault) {
	t.Helper()
	ms := in.liveMasters(t)
	m := ms[in.rng.IntN(len(ms))]
	s := in.cl.Server(m)
	f.target, f.from = "master "+m, time.Now()
	s.Pause(t)
	time.Sleep(masterPause)
	s.Resume(t)
}

// killMaster SIGKILLs a master that has a replica whose link is up, and
// waits for a replica to serve its slots; false when there is none.
func (in *injector) killMaster(t *testing.T, f *fault) bool {
	t.Helper()
	ms := in.liveMasters(t)
	in.rng.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	for _, m := range ms {
		var synced []string
		for _, r := range in.cl.ReplicasOf(t, m) {
			s := in.cl.Server(r)
			if s == nil || !s.Running() || s.Paused() {
				continue
			}
			if st, err := testredis.InfoField(r, "replication", "master_link_status"); err == nil && st == "up" {
				synced = append(synced, r)
			}
		}
		if len(synced) == 0 {
			continue
		}
		slot := -1
		for _, n := range in.cl.Nodes(t) {
			if n.Addr == m && len(n.Slots) > 0 {
				slot = n.Slots[0][0]
			}
		}
		if slot < 0 {
			continue
		}
		f.target, f.from = "master "+m, time.Now()
		in.cl.Kill(t, m)
		promoted := in.cl.WaitPromoted(t, slot, m, promotionWithin)
		f.to = time.Now()
		f.note = fmt.Sprintf("(replica %s promoted after %.1fs)", promoted, f.to.Sub(f.from).Seconds())
		return true
	}
	return false
}

// clientKill closes every normal client connection on every node that
// runs: the workers' (their replication links and the cluster bus are not
// normal clients).
func (in *injector) clientKill(t *testing.T, f *fault) {
	t.Helper()
	f.target = "every node"
	var total int64
	var errs []string
	for _, s := range in.cl.Servers {
		if !s.Running() || s.Paused() {
			continue
		}
		r, err := testredis.Do(s.Addr, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", s.Addr, err))
			continue
		}
		if n, ok := r.(int64); ok {
			total += n
		}
	}
	f.note = fmt.Sprintf("(%d connections closed)", total)
	if len(errs) > 0 {
		f.note += " errors: " + strings.Join(errs, "; ")
	}
}
