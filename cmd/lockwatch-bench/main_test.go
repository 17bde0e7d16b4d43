package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

// The parent runs each case in a child process of the same binary: under
// go test that binary is the test binary, which must then act as the
// command.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-child" {
		if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "lockwatch-bench:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A small run end to end, on a real server: every case answers, the JSON
// has the documented fields with plausible values, and lockwatch renewed
// every lock in each sweep (a case that renews fewer fails the run).
func TestRunJSON(t *testing.T) {
	srv := testredis.Start(t)
	var out, errb bytes.Buffer
	err := run([]string{"-json", "-redis", srv.Addr, "-locks", "300", "-sweeps", "1", "-hook-rounds", "1",
		"-memory-locks", "5000", "-memory-every", "100ms", "-cluster=false"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	var rep struct {
		Cases []map[string]any `json:"cases"`
		Hook  map[string]any   `json:"hook"`
		Fault *struct {
			Lockwatch faultSide `json:"lockwatch"`
			Redisson  faultSide `json:"redisson_style"`
			Locks     int       `json:"locks"`
		} `json:"fault"`
		Memory  []map[string]any `json:"memory"`
		Cluster any              `json:"cluster"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	impls := map[string]bool{}
	for _, c := range rep.Cases {
		impl, _ := c["impl"].(string)
		impls[impl] = true
		if c["locks"] != float64(300) {
			t.Errorf("%s: locks = %v, want 300", impl, c["locks"])
		}
		for _, f := range []string{"sweep_ms", "renewals_per_sec", "client_cpu_ms", "server_cpu_ms", "bytes_per_lock"} {
			v, ok := c[f].(float64)
			if !ok || v < 0 || (f != "client_cpu_ms" && f != "server_cpu_ms" && v == 0) {
				t.Errorf("%s: %s = %v, want a positive number", impl, f, c[f])
			}
		}
		// The ratio is there whenever Redis's CPU counter moved.
		if r, ok := c["wall_over_server_cpu"].(float64); !ok || r < 0 || (r == 0 && c["server_cpu_ms"].(float64) > 0) {
			t.Errorf("%s: wall_over_server_cpu = %v with server_cpu_ms %v, want a positive number", impl, c["wall_over_server_cpu"], c["server_cpu_ms"])
		}
	}
	if len(rep.Memory) != 1 {
		t.Fatalf("memory = %v, want one entry", rep.Memory)
	}
	checkMemory(t, rep.Memory[0], 5000)
	if rep.Cluster != nil {
		t.Errorf("cluster = %v with -cluster=false, want none", rep.Cluster)
	}
	for _, want := range caseOrder {
		if !impls[want] {
			t.Errorf("no %q case in %v", want, impls)
		}
	}
	for _, f := range []string{"overhead_ns", "allocs_per_op"} {
		if _, ok := rep.Hook[f].(float64); !ok {
			t.Errorf("hook.%s = %v, want a number", f, rep.Hook[f])
		}
	}
	if rep.Fault == nil {
		t.Fatal("no fault object")
	}
	if l := rep.Fault.Lockwatch; l.FailedLocks == 0 || l.RenewedInTick != rep.Fault.Locks-l.FailedLocks {
		t.Errorf("fault isolation: lockwatch renewed %d of %d with %d failed, want all the others", l.RenewedInTick, rep.Fault.Locks, l.FailedLocks)
	}
	if r := rep.Fault.Redisson; r.RenewedInTick >= rep.Fault.Locks-r.FailedLocks {
		t.Errorf("fault isolation: redisson-style renewed %d of %d, want it to stop at the failed chunk", r.RenewedInTick, rep.Fault.Locks)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-locks", "0"},
		{"-locks", "10,x"},
		{"-cases", "lockwatch,nope"},
		{"-sweeps", "0"},
		{"-hook-rounds", "0"},
		{"-per-lock-pool-timeout", "0s"},
		{"-memory-locks", "0"},
		{"-memory-locks", "x"},
		{"-memory-every", "0s"},
		{"-cluster-locks", "0"},
		{"-neighbour-locks", "0"},
		{"-neighbour-schedule", ""},
		{"-neighbour-block", "100ms"},
		{"-neighbour-block", "11s"},
		{"-neighbour-duration", "1s"},
		{"-neighbour-interval", "-1ms"},
		{"-clients", "0"},
		{"-storm-locks", "2"},
		{"-storm-ttl", "10ms"},
		{"-storm-lib", "nope"},
		{"-storm-wave", "0s"},
		{"-storm-duration", "100ms"},
		{"-storm-poll", "-1s"},
		{"-value-bytes", "10"},
		{"-value-bytes", "100000000"},
		{"extra"},
		{"-child", "lockwatch"},
		{"-child", "nope", "-redis", "127.0.0.1:1", "-n", "5"},
	} {
		var out, errb bytes.Buffer
		err := run(args, &out, &errb)
		if err == nil {
			t.Errorf("run(%q) = nil error, want one", args)
			continue
		}
		if name := strings.TrimLeft(args[0], "-"); !strings.Contains(err.Error()+errb.String(), name) && args[0] != "extra" {
			t.Errorf("run(%q) = %v, want the error to name %q", args, err, name)
		}
	}
}

func TestParseLocks(t *testing.T) {
	got, err := parseLocks("", true)
	if err != nil || fmt.Sprint(got) != "[1000 10000 100000 1000000]" {
		t.Errorf("parseLocks(\"\", full) = %v, %v", got, err)
	}
	got, err = parseLocks("", false)
	if err != nil || fmt.Sprint(got) != "[1000 10000 100000]" {
		t.Errorf("parseLocks(\"\", !full) = %v, %v", got, err)
	}
	got, err = parseLocks(" 5, 7", false)
	if err != nil || fmt.Sprint(got) != "[5 7]" {
		t.Errorf("parseLocks(\" 5, 7\") = %v, %v", got, err)
	}
}

// checkMemory checks one entry of the memory case.
func checkMemory(t *testing.T, m map[string]any, locks int) {
	t.Helper()
	num := func(f string) float64 {
		v, ok := m[f].(float64)
		if !ok {
			t.Errorf("memory.%s = %v, want a number", f, m[f])
		}
		return v
	}
	if got := num("locks"); got != float64(locks) {
		t.Errorf("memory.locks = %v, want %d", got, locks)
	}
	// 13-byte keys, redislock's 22-byte token.
	if got := num("key_value_bytes"); got != 35 {
		t.Errorf("memory.key_value_bytes = %v, want 35", got)
	}
	if got := num("goroutines"); got != memoryWorkers {
		t.Errorf("memory.goroutines = %v, want %d", got, memoryWorkers)
	}
	// Both processes keep the Lock values; lockwatch's table comes on top.
	if u := num("unwatched_bytes_per_lock"); u <= 35 {
		t.Errorf("memory.unwatched_bytes_per_lock = %v, want more than the key and value", u)
	}
	if b, w, u := num("bytes_per_lock"), num("watched_bytes_per_lock"), num("unwatched_bytes_per_lock"); b <= 0 || b != w-u {
		t.Errorf("memory.bytes_per_lock = %v (watched %v, unwatched %v), want watched minus unwatched, positive", b, w, u)
	}
	if b, beyond := num("bytes_per_lock"), num("bytes_per_lock_beyond_key_value"); beyond != b-35 {
		t.Errorf("memory.bytes_per_lock_beyond_key_value = %v with bytes_per_lock %v, want 35 less", beyond, b)
	}
	if a, w, u := num("after_release_mb"), num("watched_after_release_mb"), num("unwatched_after_release_mb"); a != w-u {
		t.Errorf("memory.after_release_mb = %v, want watched %v minus unwatched %v", a, w, u)
	}
	num("right_after_release_mb")
	// The sweeps ran while obtaining and while holding, and the release
	// untracked every lock.
	if got := num("sweeps_while_obtaining"); got < 1 {
		t.Errorf("memory.sweeps_while_obtaining = %v, want at least 1", got)
	}
	if got := num("sweeps_while_held"); got < memorySweeps {
		t.Errorf("memory.sweeps_while_held = %v, want at least %d", got, memorySweeps)
	}
	if got := num("sweeps_after_release"); got < memorySweeps {
		t.Errorf("memory.sweeps_after_release = %v, want at least %d", got, memorySweeps)
	}
	if got := num("tracked_after_release"); got != 0 {
		t.Errorf("memory.tracked_after_release = %v, want 0", got)
	}
}

// The cluster case end to end: the command starts a 3-master cluster,
// spreads the locks over it and sweeps it in turn with a single server.
func TestRunCluster(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if os.Getenv(testredis.RequireEnv) == "1" {
			t.Fatalf("redis-cli not on PATH (%v) and %s=1", err, testredis.RequireEnv)
		}
		t.Skipf("redis-cli not on PATH (%v)", err)
	}
	srv := testredis.Start(t)
	var out, errb bytes.Buffer
	err := run([]string{"-json", "-redis", srv.Addr, "-cases", "lockwatch", "-locks", "300", "-sweeps", "2", "-hook-rounds", "1",
		"-fault=false", "-cluster-locks", "3000"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	var rep struct {
		Memory  []any          `json:"memory"`
		Cluster *clusterResult `json:"cluster"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if rep.Memory != nil {
		t.Errorf("memory = %v with -cases lockwatch, want none", rep.Memory)
	}
	c := rep.Cluster
	if c == nil {
		t.Fatalf("no cluster object in %s", out.String())
	}
	if c.Masters != 3 || c.Locks != 3000 || len(c.SweepsMS) != 2 {
		t.Errorf("cluster: %d masters, %d locks, %d sweeps; want 3, 3000, 2", c.Masters, c.Locks, len(c.SweepsMS))
	}
	if len(c.Nodes) != 3 {
		t.Fatalf("cluster nodes = %+v, want 3", c.Nodes)
	}
	var locks int64
	for _, nd := range c.Nodes {
		locks += nd.Locks
		if nd.Locks == 0 || nd.LaneSweepMS <= 0 {
			t.Errorf("cluster node %+v: want locks and a lane sweep time", nd)
		}
	}
	if locks != 3000 {
		t.Errorf("cluster nodes hold %d locks, want 3000", locks)
	}
	for name, v := range map[string]float64{
		"sweep_ms": c.SweepMS, "busiest_node_cpu_ms": c.BusiestNodeCPUMS, "server_cpu_ms": c.ServerCPUMS,
		"wall_over_busiest_node_cpu": c.WallOverBusiestNodeCPU, "single_over_cluster": c.SingleOverCluster,
		"single.sweep_ms": c.Single.SweepMS,
	} {
		if v <= 0 {
			t.Errorf("cluster.%s = %v, want a positive number", name, v)
		}
	}
	if c.BusiestNodeCPUMS > c.ServerCPUMS {
		t.Errorf("cluster: busiest node %v ms of CPU, more than all nodes' %v", c.BusiestNodeCPUMS, c.ServerCPUMS)
	}
	if c.Single.Impl != "lockwatch" || c.Single.Locks != 3000 {
		t.Errorf("cluster.single = %s at %d locks, want lockwatch at 3000", c.Single.Impl, c.Single.Locks)
	}
}

// The cluster case runs unless -cluster=false; -full adds 1M locks to the
// memory case; -cases chooses the memory case like the others.
func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, true},
		{[]string{"-full"}, true},
		{[]string{"-cluster=false"}, false},
		{[]string{"-full", "-cluster=false"}, false},
	} {
		cfg, err := parseArgs(tc.args, io.Discard)
		if err != nil || cfg.cluster != tc.want {
			t.Errorf("parseArgs(%q).cluster = %v, %v; want %v", tc.args, cfg.cluster, err, tc.want)
		}
	}
	cfg, err := parseArgs([]string{"-full"}, io.Discard)
	if err != nil || fmt.Sprint(cfg.memLocks) != "[20000 100000 1000000]" || !cfg.memory {
		t.Errorf("parseArgs(-full): memory %v at %v, %v; want it at 20000, 100000 and 1000000", cfg.memory, cfg.memLocks, err)
	}
	cfg, err = parseArgs([]string{"-cases", "ceiling"}, io.Discard)
	if err != nil || cfg.memory || fmt.Sprint(cfg.impls) != "[ceiling]" {
		t.Errorf("parseArgs(-cases ceiling): memory %v, cases %v, %v; want ceiling alone", cfg.memory, cfg.impls, err)
	}
	// The neighbour and clients cases run only when -cases names them.
	cfg, err = parseArgs(nil, io.Discard)
	if err != nil || cfg.neighbour || cfg.clients {
		t.Errorf("parseArgs(nil): neighbour %v, clients %v, %v; want neither", cfg.neighbour, cfg.clients, err)
	}
	cfg, err = parseArgs([]string{"-cases", "neighbour,clients"}, io.Discard)
	if err != nil || !cfg.neighbour || !cfg.clients || cfg.memory || len(cfg.impls) != 0 || cfg.cluster || cfg.fault {
		t.Errorf("parseArgs(-cases neighbour,clients): neighbour %v, clients %v, memory %v, cases %v, cluster %v, fault %v, %v; want those two alone",
			cfg.neighbour, cfg.clients, cfg.memory, cfg.impls, cfg.cluster, cfg.fault, err)
	}
	cfg, err = parseArgs([]string{"-cases", "storm"}, io.Discard)
	if err != nil || !cfg.storm || cfg.neighbour || cfg.memory || len(cfg.impls) != 0 || cfg.cluster || cfg.fault {
		t.Errorf("parseArgs(-cases storm): storm %v, neighbour %v, memory %v, cases %v, cluster %v, fault %v, %v; want storm alone",
			cfg.storm, cfg.neighbour, cfg.memory, cfg.impls, cfg.cluster, cfg.fault, err)
	}
	cfg, err = parseArgs([]string{"-cases", "neighbour", "-cluster", "-fault"}, io.Discard)
	if err != nil || !cfg.neighbour || !cfg.cluster || !cfg.fault {
		t.Errorf("parseArgs(-cases neighbour -cluster -fault): neighbour %v, cluster %v, fault %v, %v; want all three", cfg.neighbour, cfg.cluster, cfg.fault, err)
	}
	cfg, err = parseArgs([]string{"-cases", "lockwatch,neighbour"}, io.Discard)
	if err != nil || !cfg.neighbour || !cfg.cluster || !cfg.fault {
		t.Errorf("parseArgs(-cases lockwatch,neighbour): neighbour %v, cluster %v, fault %v, %v; want all three", cfg.neighbour, cfg.cluster, cfg.fault, err)
	}
}

// The neighbour and clients cases, tiny, end to end on a real server:
// both modes of both pools answer, sweeps ran only with lockwatch and lost
// nothing; the clients case counts connections, heap and goroutines per
// watched client.
func TestRunNeighbourClients(t *testing.T) {
	srv := testredis.Start(t)
	var out, errb bytes.Buffer
	// A command of each stream every 5 ms, not the bench's 1 ms: under
	// -race beside two burners the ten streams' 10,000 commands a second
	// overran the process (the bench built with -race, same load: app
	// and Release p50 500 ms, nearly every one at its 500 ms timeout,
	// with lockwatch and without), and with every lock waiting to be
	// obtained again after a Release that timed out, the releasers found
	// none free: CI run 93 counted 0 releases in the default pool's
	// blocks, and repeats as few as 0-63 in a block without lockwatch. At 5 ms,
	// six repeats: every stream's count in full (800, 100, 200).
	err := run([]string{"-json", "-redis", srv.Addr, "-cases", "neighbour,clients", "-hook-rounds", "1", "-fault=false", "-cluster=false",
		"-neighbour-locks", "2000", "-neighbour-duration", "1s", "-neighbour-block", "500ms", "-neighbour-schedule", "@every 100ms",
		"-neighbour-interval", "5ms", "-clients", "10"}, &out, &errb)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	var rep struct {
		Cases     []any            `json:"cases"`
		Neighbour *neighbourResult `json:"neighbour"`
		Clients   *clientsResult   `json:"clients"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out.String())
	}
	if len(rep.Cases) != 0 {
		t.Errorf("cases = %v with -cases neighbour,clients, want none", rep.Cases)
	}
	nb := rep.Neighbour
	if nb == nil {
		t.Fatalf("no neighbour object in %s", out.String())
	}
	if nb.Locks != 2000 || nb.Blocks != 2 || len(nb.Pools) != len(neighbourPools) {
		t.Fatalf("neighbour: %d locks, %d blocks, %d pools; want 2000, 2, %d", nb.Locks, nb.Blocks, len(nb.Pools), len(neighbourPools))
	}
	for i, p := range nb.Pools {
		if p.Pool != neighbourPools[i] {
			t.Errorf("neighbour pool %d = %q, want %q", i, p.Pool, neighbourPools[i])
		}
		if p.Pool == "small" && (p.PoolSize != smallPoolSize || p.PoolTimeoutMS != ms(smallPoolTimeout)) {
			t.Errorf("neighbour small pool: size %d, timeout %v ms; want %d, %v", p.PoolSize, p.PoolTimeoutMS, smallPoolSize, ms(smallPoolTimeout))
		}
		// Each stream has commands in the run; one block of 500 ms may
		// have none of a kind on a loaded machine (CI run 21: the child
		// stood still, or every lock was being obtained again after a
		// release that waited for a connection of the pool of four), so
		// the blocks are judged together.
		var app, ping, rel int
		for _, m := range []struct {
			name string
			f    neighbourMode
		}{{"with", p.With}, {"without", p.Without}} {
			if m.f.Blocks != 1 {
				t.Errorf("neighbour %s pool, %s: %d blocks, want 1", p.Pool, m.name, m.f.Blocks)
			}
			app, ping, rel = app+m.f.App.Count, ping+m.f.Ping.Count, rel+m.f.Release.Count
			t.Logf("neighbour %s pool, %s: %d app commands, %d PINGs, %d releases", p.Pool, m.name, m.f.App.Count, m.f.Ping.Count, m.f.Release.Count)
			if a := m.f.App; a.Count > 0 && (a.P50MS <= 0 || a.P99MS < a.P50MS || a.MaxMS < a.P99MS) {
				t.Errorf("neighbour %s pool, %s: app p50 %v, p99 %v, max %v ms; want 0 < p50 <= p99 <= max", p.Pool, m.name, a.P50MS, a.P99MS, a.MaxMS)
			}
		}
		if app == 0 || ping == 0 || rel == 0 {
			t.Errorf("neighbour %s pool: %d app commands, %d PINGs, %d releases in its blocks; want some of each", p.Pool, app, ping, rel)
		}
		// A smoke test of the case, run under -race on a loaded machine:
		// its blocks are too short for the timing figures (sweeps and
		// renewals counted within a 500 ms block, releases within their
		// 500 ms) to be judged here; the bench reports them.
		if p.Without.Sweeps != 0 {
			t.Errorf("neighbour %s pool: %d sweeps without lockwatch, want none", p.Pool, p.Without.Sweeps)
		}
		if p.Lost != 0 {
			t.Errorf("neighbour %s pool: %d lost; want none", p.Pool, p.Lost)
		}
		if p.With.AppDuringSweeps == nil || p.Without.AppDuringSweeps != nil {
			t.Errorf("neighbour %s pool: app during sweeps %v with, %v without; want it with lockwatch only", p.Pool, p.With.AppDuringSweeps, p.Without.AppDuringSweeps)
		}
		if rise := p.With.App.P99MS - p.Without.App.P99MS; p.AppP99RiseMS != rise {
			t.Errorf("neighbour %s pool: app p99 rise %v, want with minus without, %v", p.Pool, p.AppP99RiseMS, rise)
		}
	}
	c := rep.Clients
	if c == nil {
		t.Fatalf("no clients object in %s", out.String())
	}
	if c.Clients != 10 || c.Watched.Tracked != 10 || c.Watched.Sweeps < clientsTicks*10 {
		t.Errorf("clients: %d clients, %d tracked, %d sweeps; want 10, 10, at least %d", c.Clients, c.Watched.Tracked, c.Watched.Sweeps, clientsTicks*10)
	}
	// Each client opened a connection to obtain its lock.
	if c.Unwatched.Conns < 10 || c.Watched.Conns < 10 {
		t.Errorf("clients: %d connections unwatched, %d watched; want at least one per client", c.Unwatched.Conns, c.Watched.Conns)
	}
	if c.Watched.Goroutines <= c.Unwatched.Goroutines || !perEndpoint(c) {
		t.Errorf("clients: %d goroutines watched (%d at %d locks a client), %d unwatched; want more watched, not growing with the locks",
			c.Watched.Goroutines, c.Watched.MoreGoroutines, 1+clientsMoreLocks, c.Unwatched.Goroutines)
	}
	if c.ConnsPerClient != float64(c.Watched.Conns-c.Unwatched.Conns)/10 {
		t.Errorf("clients: %v connections per client, want watched minus unwatched over 10", c.ConnsPerClient)
	}
}
