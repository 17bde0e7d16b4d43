package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The cluster case: the same N locks obtained through redislock on a
// watched *redis.ClusterClient over a Redis Cluster of clusterMasters
// masters on loopback (their keys spread by hash slot), swept in turn with
// a single-server lockwatch case of the same N.
const (
	clusterMasters = 3
	// clusterCase is the cluster case's child name.
	clusterCase = "cluster-lockwatch"
	// clusterStartTimeout bounds the creation of the cluster.
	clusterStartTimeout = time.Minute
)

// clusterResult is the -json "cluster" object.
type clusterResult struct {
	Masters int `json:"masters"`
	Locks   int `json:"locks"`
	// SweepMS is the median wall time of a Sweep over every master (the
	// lanes sweep their nodes at the same time).
	SweepMS        float64   `json:"sweep_ms"`
	SweepsMS       []float64 `json:"sweeps_ms"`
	RenewalsPerSec float64   `json:"renewals_per_sec"`
	ClientCPUMS    float64   `json:"client_cpu_ms"`
	// ServerCPUMS is the CPU time of all masters across a sweep, and
	// BusiestNodeCPUMS that of the busiest master (medians over sweeps).
	ServerCPUMS      float64 `json:"server_cpu_ms"`
	BusiestNodeCPUMS float64 `json:"busiest_node_cpu_ms"`
	// WallOverBusiestNodeCPU is the median of each sweep's wall time over
	// its busiest master's CPU time: 1 would mean the sweep took no longer
	// than the busiest node needed. WallOverServerCPU is over all masters'
	// CPU time together.
	WallOverBusiestNodeCPU float64       `json:"wall_over_busiest_node_cpu"`
	WallOverServerCPU      float64       `json:"wall_over_server_cpu"`
	Nodes                  []clusterNode `json:"nodes"`
	// Single is lockwatch on the single server with the same N, swept in
	// turn with the cluster in the same run; SingleOverCluster is its
	// sweep time over the cluster's (above 1: the cluster sweeps faster).
	Single            result  `json:"single"`
	SingleOverCluster float64 `json:"single_over_cluster"`
	CPUs              int     `json:"cpus"`
}

// clusterNode is one master's figures, medians over the sweeps.
type clusterNode struct {
	Addr        string  `json:"addr"`
	Locks       int64   `json:"locks"`
	ServerCPUMS float64 `json:"server_cpu_ms"`
	LaneSweepMS float64 `json:"lane_sweep_ms"`
}

// cluster is a Redis Cluster this command started.
type cluster struct {
	nodes []*server
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		out[i] = s.addr
	}
	return out
}

// stop stops every node by its pid and removes its directory.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, s := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); s.stop() }()
	}
	wg.Wait()
}

// startCluster starts masters cluster-enabled redis-servers on free
// loopback ports, each with a directory of its own, joins them with
// redis-cli --cluster create and waits until every node reports
// cluster_state:ok and knows every other. On error every started node is
// stopped.
func startCluster(ctx context.Context, masters int) (_ *cluster, err error) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("the cluster case starts its own nodes and needs %s on PATH (Debian: apt-get install redis-server); run with -cluster=false to leave it out", bin)
		}
	}
	cli, _ := exec.LookPath("redis-cli")
	ctx, cancel := context.WithTimeout(ctx, clusterStartTimeout)
	defer cancel()
	c := &cluster{}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	for range masters {
		s, err := startServer(ctx, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
		if err != nil {
			return nil, fmt.Errorf("cluster node: %w", err)
		}
		c.nodes = append(c.nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	for _, addr := range c.addrs() {
		if err := waitClusterOK(ctx, addr, masters); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// waitClusterOK polls CLUSTER INFO on addr until it reports
// cluster_state:ok, all slots assigned and ok, and n known nodes.
func waitClusterOK(ctx context.Context, addr string, n int) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	want := map[string]string{"cluster_state": "ok", "cluster_slots_ok": "16384", "cluster_known_nodes": fmt.Sprint(n)}
	var last string
	for {
		txt, err := c.ClusterInfo(ctx).Result()
		if err == nil {
			last = ""
			for k, v := range want {
				if got := infoField(txt, k); got != v {
					last = fmt.Sprintf("%s:%s (want %s)", k, got, v)
					break
				}
			}
			if last == "" {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster node %s not ready: %s: %w", addr, last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func infoField(txt, key string) string {
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && k == key {
			return v
		}
	}
	return ""
}

// measureCluster starts a cluster, sets up the cluster case and a
// single-server lockwatch case at n locks (on addr), sweeps them in turn
// and stops the cluster.
func measureCluster(ctx context.Context, addr string, n int, cfg config, stderr io.Writer) (*clusterResult, error) {
	fmt.Fprintf(stderr, "cluster: starting %d masters ...\n", clusterMasters)
	cl, err := startCluster(ctx, clusterMasters)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	fmt.Fprintf(stderr, "cluster: %s; %d locks: setting up the cluster case and lockwatch on one server\n", strings.Join(cl.addrs(), " "), n)
	procs := make([]*caseProc, 0, 2)
	closeAll := func() {
		for _, p := range procs {
			p.kill()
		}
	}
	defer closeAll()
	for _, c := range []struct{ impl, addr string }{{"lockwatch", addr}, {clusterCase, strings.Join(cl.addrs(), ",")}} {
		p, err := startCase(ctx, c.addr, c.impl, n)
		if err != nil {
			return nil, fmt.Errorf("%s at %d locks: %w", c.impl, n, err)
		}
		procs = append(procs, p)
	}
	samples := make([][]sample, len(procs))
	for round := range cfg.sweeps {
		for i, p := range procs {
			s, err := p.sweep()
			if err != nil {
				return nil, fmt.Errorf("%s at %d locks, sweep %d: %w", p.impl, n, round+1, err)
			}
			fmt.Fprintf(stderr, "cluster, %d locks: %s sweep %d: %.1f ms\n", n, p.impl, round+1, ms(s.wall))
			samples[i] = append(samples[i], s)
		}
	}
	var fins [2]result
	for i, p := range procs {
		if fins[i], err = p.finish(); err != nil {
			return nil, fmt.Errorf("%s at %d locks: %w", p.impl, n, err)
		}
	}
	single := summarize("lockwatch", n, samples[0])
	single.BytesPerLock, single.KeyValueBytes, single.PeakRSSMB = fins[0].BytesPerLock, fins[0].KeyValueBytes, fins[0].PeakRSSMB
	r := summarizeCluster(n, samples[1], fins[1].NodeLocks)
	r.CPUs = runtime.NumCPU()
	r.Single = single
	if r.SweepMS > 0 {
		r.SingleOverCluster = single.SweepMS / r.SweepMS
	}
	return r, nil
}

// summarizeCluster turns the cluster case's samples into its result.
func summarizeCluster(n int, samples []sample, locks map[string]int64) *clusterResult {
	s := summarize(clusterCase, n, samples)
	r := &clusterResult{
		Masters: clusterMasters, Locks: n, SweepMS: s.SweepMS, SweepsMS: s.SweepsMS,
		RenewalsPerSec: s.RenewalsPerSec, ClientCPUMS: s.ClientCPUMS, ServerCPUMS: s.ServerCPUMS,
		WallOverServerCPU: s.WallOverServerCPU,
	}
	busiest := func(s sample) time.Duration {
		var m int64
		for _, nd := range s.nodes {
			m = max(m, nd.CPUNS)
		}
		return time.Duration(m)
	}
	var b []float64
	for _, s := range samples {
		b = append(b, ms(busiest(s)))
	}
	r.BusiestNodeCPUMS = median(b)
	r.WallOverBusiestNodeCPU = wallOverCPU(samples, busiest)
	cpu, lane := map[string][]float64{}, map[string][]float64{}
	for _, s := range samples {
		for _, nd := range s.nodes {
			cpu[nd.Addr] = append(cpu[nd.Addr], ms(time.Duration(nd.CPUNS)))
			lane[nd.Addr] = append(lane[nd.Addr], ms(time.Duration(nd.LaneNS)))
		}
	}
	for addr := range cpu {
		r.Nodes = append(r.Nodes, clusterNode{Addr: addr, Locks: locks[addr], ServerCPUMS: median(cpu[addr]), LaneSweepMS: median(lane[addr])})
	}
	slices.SortFunc(r.Nodes, func(a, b clusterNode) int { return strings.Compare(a.Addr, b.Addr) })
	return r
}

// clusterBench is the cluster case in its child process: locks obtained
// through redislock on a watched cluster client, swept with Sweep.
type clusterBench struct {
	cc      *redis.ClusterClient
	obs     map[string]*redis.Client // per master, for INFO cpu
	masters []string
	wd      *watchdog.Watchdog
	n       int
	mem, kv int64
	locks   map[string]int64 // keys per master
}

// setupCluster sets the cluster case up; addrs is the nodes' addresses,
// comma-separated.
func setupCluster(ctx context.Context, addrs, prefix string, n int) (bench, error) {
	b := &clusterBench{
		cc:    redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(addrs, ",")}),
		obs:   map[string]*redis.Client{},
		n:     n,
		locks: map[string]int64{},
	}
	reg := registry.New(bsmredislock.New())
	if err := reg.Watch(b.cc); err != nil {
		b.close()
		return nil, err
	}
	var err error
	if b.wd, err = watchdog.Attach(reg, watchdog.WithSchedule(lockwatchSchedule)); err != nil {
		b.close()
		return nil, err
	}
	// Find the masters and open every master's pool.
	var mu sync.Mutex
	err = b.cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		addr := m.Options().Addr
		mu.Lock()
		b.masters = append(b.masters, addr)
		b.obs[addr] = redis.NewClient(&redis.Options{Addr: addr})
		mu.Unlock()
		return warm(ctx, m, obtainWorkers)
	})
	if err != nil {
		b.close()
		return nil, err
	}
	slices.Sort(b.masters)
	if len(b.masters) != clusterMasters {
		b.close()
		return nil, fmt.Errorf("the cluster client sees %d masters, want %d", len(b.masters), clusterMasters)
	}
	before := liveBytes()
	if b.kv, err = obtainAll(ctx, b.cc, prefix, n, nil); err != nil {
		b.close()
		return nil, err
	}
	b.mem = liveBytes() - before
	if got := reg.Len(); got != n {
		b.close()
		return nil, fmt.Errorf("registry tracks %d locks, want %d", got, n)
	}
	for _, addr := range b.masters {
		if b.locks[addr], err = b.obs[addr].DBSize(ctx).Result(); err != nil {
			b.close()
			return nil, err
		}
	}
	return b, nil
}

func (b *clusterBench) sweep(ctx context.Context) (sample, error) {
	renewed := b.wd.Stats().Renewals
	cpu := func() (map[string]float64, error) {
		out := map[string]float64{}
		for _, addr := range b.masters {
			si, err := readInfo(ctx, b.obs[addr])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", addr, err)
			}
			out[addr] = si.cpu
		}
		return out, nil
	}
	srv0, err := cpu()
	if err != nil {
		return sample{}, err
	}
	cpu0, t0 := processCPU(), time.Now()
	if err := b.wd.Sweep(ctx); err != nil {
		return sample{}, fmt.Errorf("sweep: %w", err)
	}
	wall, client := time.Since(t0), processCPU()-cpu0
	srv1, err := cpu()
	if err != nil {
		return sample{}, err
	}
	st := b.wd.Stats()
	if got := st.Renewals - renewed; got != int64(b.n) {
		return sample{}, fmt.Errorf("a sweep renewed %d locks, want %d", got, b.n)
	}
	s := sample{wall: wall, clientCPU: client}
	for _, addr := range b.masters {
		nd := nodeSample{Addr: addr, CPUNS: int64((srv1[addr] - srv0[addr]) * float64(time.Second))}
		for _, ep := range st.Endpoints {
			if ep.Endpoint == addr {
				nd.LaneNS = int64(ep.LastSweep)
			}
		}
		s.serverCPU += time.Duration(nd.CPUNS)
		s.nodes = append(s.nodes, nd)
	}
	return s, nil
}

func (b *clusterBench) finish() result {
	return result{
		BytesPerLock:  float64(b.mem) / float64(b.n),
		KeyValueBytes: float64(b.kv) / float64(b.n),
		NodeLocks:     b.locks,
	}
}

func (b *clusterBench) close() {
	if b.wd != nil {
		b.wd.Stop()
	}
	_ = b.cc.Close()
	for _, c := range b.obs {
		_ = c.Close()
	}
}

func printCluster(w io.Writer, r *clusterResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\ncluster: %d locks through a watched *redis.ClusterClient, %d masters on loopback (no replicas), swept in turn with lockwatch on the single server (%d CPUs: the nodes share them)\n",
		r.Locks, r.Masters, r.CPUs)
	tw := newTable(w)
	fmt.Fprintln(tw, "\tsweep ms\trenewals/s\tclient CPU ms\tserver CPU ms\tbusiest node CPU ms\twall/busiest node CPU\twall/server CPU\t")
	s := r.Single
	fmt.Fprintf(tw, "single server\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n",
		s.SweepMS, s.RenewalsPerSec, s.ClientCPUMS, s.ServerCPUMS, s.ServerCPUMS, ratio(s.WallOverServerCPU), ratio(s.WallOverServerCPU))
	fmt.Fprintf(tw, "cluster, %d masters\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n",
		r.Masters, r.SweepMS, r.RenewalsPerSec, r.ClientCPUMS, r.ServerCPUMS, r.BusiestNodeCPUMS, ratio(r.WallOverBusiestNodeCPU), ratio(r.WallOverServerCPU))
	_ = tw.Flush()
	for _, nd := range r.Nodes {
		fmt.Fprintf(w, "  node %s: %d locks, %.1f ms of CPU a sweep, its lane swept it in %.1f ms\n", nd.Addr, nd.Locks, nd.ServerCPUMS, nd.LaneSweepMS)
	}
	fmt.Fprintf(w, "  single server over cluster sweep time: %.2fx\n", r.SingleOverCluster)
}
