// Command lockwatch-bench measures one renewal sweep of lockwatch side by
// side with the two designs other watchdogs use and with the server's own
// ceiling, on one redis-server, in one run:
//
//   - lockwatch: locks obtained through redislock on a watched client,
//     renewed by the watchdog (driven by Sweep, not by the clock);
//   - per-lock: one goroutine and ticker per lock calling redislock's
//     Refresh, as redislock's README recommends;
//   - redisson-style: 100 keys per owner-checked script call, one call
//     after another, as Redisson's watchdog batches;
//   - ceiling: pipelined single-key EVALSHA of an owner-checked PEXPIRE,
//     from one connection.
//
// For each case it reports, besides times and CPU, each sweep's wall time
// over the Redis CPU time it caused (wall_over_server_cpu).
//
// It starts its own redis-server on a free loopback port unless -redis is
// given. Each case runs in a child process of its own (the same binary), so
// that memory and CPU figures are the case's alone. It also measures:
//
//   - what a watched client adds to commands that are not lock commands;
//   - the memory case (-cases memory, -memory-locks): what lockwatch adds to
//     the heap of a process that obtains, holds and releases redislock
//     locks while sweeps run, against the same process unwatched;
//   - the cluster case (-cluster, -cluster-locks): a sweep of locks spread
//     over a 3-master Redis Cluster it starts on loopback, against the same
//     number on the single server;
//   - with -fault, how one failing chunk affects the others.
//
// Usage:
//
//	go run ./cmd/lockwatch-bench [-full] [-json] [-redis host:port] [-sweeps 3] [-locks 1000,10000] [-fault=false]
//	    [-cases lockwatch,per-lock,redisson-style,ceiling,memory] [-memory-locks 20000,100000] [-memory-every 1s]
//	    [-cluster=false] [-cluster-locks 100000]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
)

// report is the -json output.
type report struct {
	Cases []result     `json:"cases"`
	Hook  hookResult   `json:"hook"`
	Fault *faultResult `json:"fault,omitempty"`
	// Memory is the memory case, one entry per size (-memory-locks).
	Memory []memoryResult `json:"memory,omitempty"`
	// Cluster is the cluster case (-cluster).
	Cluster *clusterResult `json:"cluster,omitempty"`
	Env     envInfo        `json:"env"`
}

type envInfo struct {
	Redis     string `json:"redis_version"`
	Addr      string `json:"redis_addr"`
	Go        string `json:"go_version"`
	CPUs      int    `json:"cpus"`
	OS        string `json:"os"`
	Sweeps    int    `json:"sweeps"`
	StartedAt string `json:"started_at"`
}

type config struct {
	redis   string
	full    bool
	asJSON  bool
	sweeps  int
	locks   []int
	impls   []string
	fault   bool
	hookRun int
	// child and n are -child and -n: run one case in this process.
	child string
	n     int
	// memory runs the memory case at memLocks.
	memory   bool
	memLocks []int
	// cluster runs the cluster case at clusterLocks.
	cluster      bool
	clusterLocks int
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockwatch-bench:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	cfg, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	if cfg.child != "" {
		return runChild(cfg.child, cfg.redis, cfg.n, os.Stdin, stdout)
	}
	return parent(cfg, stdout, stderr)
}

// parseArgs parses and checks the command line.
func parseArgs(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("lockwatch-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg   config
		locks = fs.String("locks", "", "comma-separated lock counts (default 1000,10000,100000, and 1000000 with -full)")
		impls = fs.String("cases", strings.Join(append(caseOrder[:len(caseOrder):len(caseOrder)], "memory"), ","),
			"comma-separated cases to run: sweep cases "+strings.Join(caseOrder, ", ")+", and memory (see -memory-locks)")
		memLocks = fs.String("memory-locks", "", "comma-separated lock counts of the memory case (default 20000,100000, and 1000000 with -full)")
	)
	fs.StringVar(&cfg.child, "child", "", "internal: run one case in this process and print its result as JSON")
	fs.IntVar(&cfg.n, "n", 0, "internal: lock count of -child")
	fs.StringVar(&cfg.redis, "redis", "", "host:port of a redis-server to use (default: start one on a free loopback port)")
	fs.BoolVar(&cfg.full, "full", false, "also measure 1M locks")
	fs.BoolVar(&cfg.asJSON, "json", false, "print one JSON object on stdout instead of a table")
	fs.IntVar(&cfg.sweeps, "sweeps", 5, "measured sweeps per case (the median is reported)")
	fs.BoolVar(&cfg.fault, "fault", true, "also measure fault isolation: one failing chunk in a sweep")
	fs.IntVar(&cfg.hookRun, "hook-rounds", 15, "rounds of the hook overhead measurement")
	fs.BoolVar(&cfg.cluster, "cluster", true, "also measure a sweep on a 3-master Redis Cluster the command starts on loopback (needs redis-server and redis-cli on PATH, even with -redis)")
	fs.IntVar(&cfg.clusterLocks, "cluster-locks", 100_000, "lock count of the cluster case")
	fs.DurationVar(&memoryEvery, "memory-every", defaultMemoryEvery, "the memory case's watched process sweeps on \"@every\" this period")
	fs.DurationVar(&perLockPoolTimeout, "per-lock-pool-timeout", defaultPerLockPoolTimeout,
		"PoolTimeout of the per-lock case's client; with a short one (go-redis's default is 4s) refreshes that wait longer fail and are counted instead of ending the run")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.sweeps < 1 {
		return cfg, fmt.Errorf("-sweeps %d: need at least 1", cfg.sweeps)
	}
	if perLockPoolTimeout <= 0 {
		return cfg, fmt.Errorf("-per-lock-pool-timeout %v: need a positive duration", perLockPoolTimeout)
	}
	if cfg.hookRun < 1 {
		return cfg, fmt.Errorf("-hook-rounds %d: need at least 1", cfg.hookRun)
	}
	if cfg.clusterLocks < 1 {
		return cfg, fmt.Errorf("-cluster-locks %d: need a positive lock count", cfg.clusterLocks)
	}
	if memoryEvery < time.Millisecond {
		return cfg, fmt.Errorf("-memory-every %v: need at least 1ms", memoryEvery)
	}
	var err error
	if cfg.locks, err = parseLocks(*locks, cfg.full); err != nil {
		return cfg, err
	}
	if cfg.memLocks, err = parseCounts("-memory-locks", *memLocks, []int{20_000, 100_000}, cfg.full); err != nil {
		return cfg, err
	}
	for _, name := range strings.Split(*impls, ",") {
		name = strings.TrimSpace(name)
		if name == "memory" {
			cfg.memory = true
			continue
		}
		if _, ok := cases[name]; !ok {
			return cfg, fmt.Errorf("-cases: unknown case %q (known: %s, memory)", name, strings.Join(caseOrder, ", "))
		}
		cfg.impls = append(cfg.impls, name)
	}
	return cfg, nil
}

func parseLocks(s string, full bool) ([]int, error) {
	return parseCounts("-locks", s, []int{1_000, 10_000, 100_000}, full)
}

// parseCounts parses flag's comma-separated lock counts s; when s is
// empty, it returns def, and with full a million more.
func parseCounts(flag, s string, def []int, full bool) ([]int, error) {
	if s == "" {
		out := slices.Clone(def)
		if full {
			out = append(out, 1_000_000)
		}
		return out, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flag, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parent(cfg config, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	addr := cfg.redis
	if addr == "" {
		srv, err := startServer(ctx)
		if err != nil {
			return err
		}
		defer srv.stop()
		addr = srv.addr
		fmt.Fprintf(stderr, "started redis-server on %s\n", addr)
	}
	obs := redis.NewClient(&redis.Options{Addr: addr})
	defer obs.Close()
	si, err := readInfo(ctx, obs)
	if err != nil {
		return fmt.Errorf("redis at %s: %w", addr, err)
	}
	rep := report{Env: envInfo{
		Redis: si.version, Addr: addr, Go: runtime.Version(), CPUs: runtime.NumCPU(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Sweeps: cfg.sweeps, StartedAt: time.Now().UTC().Format(time.RFC3339),
	}}

	fmt.Fprintf(stderr, "hook overhead: %d rounds\n", cfg.hookRun)
	if rep.Hook, err = measureHook(cfg.hookRun); err != nil {
		return fmt.Errorf("hook: %w", err)
	}
	for _, n := range cfg.locks {
		if len(cfg.impls) == 0 {
			break
		}
		rs, err := measureAt(ctx, addr, n, cfg, stderr)
		if err != nil {
			return err
		}
		rep.Cases = append(rep.Cases, rs...)
		if err := obs.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL: %w", err)
		}
	}
	if cfg.memory {
		for _, n := range cfg.memLocks {
			fmt.Fprintf(stderr, "memory, %d locks, unwatched and watched side by side ...\n", n)
			m, err := measureMemory(ctx, addr, n)
			if err != nil {
				return fmt.Errorf("memory at %d locks: %w", n, err)
			}
			fmt.Fprintf(stderr, "memory, %d locks: obtained in %.1f s watched (%d sweeps meanwhile), %.1f s unwatched; lockwatch %.0f B/lock\n",
				n, m.ObtainMS/1000, m.SweepsWhileObtaining, m.UnwatchedObtainMS/1000, m.BytesPerLock)
			rep.Memory = append(rep.Memory, m)
			if err := obs.FlushAll(ctx).Err(); err != nil {
				return fmt.Errorf("FLUSHALL: %w", err)
			}
		}
	}
	if cfg.cluster {
		if rep.Cluster, err = measureCluster(ctx, addr, cfg.clusterLocks, cfg, stderr); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		if err := obs.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL: %w", err)
		}
	}
	if cfg.fault {
		n := 10_000
		if err := obs.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("FLUSHALL: %w", err)
		}
		fmt.Fprintf(stderr, "fault isolation, %d locks ...\n", n)
		f, err := spawnFault(ctx, addr, n)
		if err != nil {
			return fmt.Errorf("fault isolation: %w", err)
		}
		rep.Fault = &f
	}
	_ = obs.FlushAll(ctx).Err()
	if cfg.asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(rep)
	}
	printTable(stdout, rep)
	return nil
}

// measureAt measures every case at n locks. The interleaved cases are set
// up side by side, each in its own process, and swept in turn; per-lock
// runs alone afterwards, since its tickers keep firing.
func measureAt(ctx context.Context, addr string, n int, cfg config, stderr io.Writer) ([]result, error) {
	var inter, alone []string
	for _, impl := range cfg.impls {
		if interleaved(impl) {
			inter = append(inter, impl)
		} else {
			alone = append(alone, impl)
		}
	}
	out := map[string]result{}
	for _, group := range [][]string{inter, alone} {
		if len(group) == 0 {
			continue
		}
		procs := make([]*caseProc, 0, len(group))
		closeAll := func() {
			for _, p := range procs {
				p.kill()
			}
		}
		for _, impl := range group {
			fmt.Fprintf(stderr, "%d locks: setting up %s\n", n, impl)
			p, err := startCase(ctx, addr, impl, n)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("%s at %d locks: %w", impl, n, err)
			}
			procs = append(procs, p)
		}
		samples := make([][]sample, len(procs))
		for round := range cfg.sweeps {
			for i, p := range procs {
				s, err := p.sweep()
				if err != nil {
					closeAll()
					return nil, fmt.Errorf("%s at %d locks, sweep %d: %w", p.impl, n, round+1, err)
				}
				fmt.Fprintf(stderr, "%d locks: %s sweep %d: %.1f ms\n", n, p.impl, round+1, ms(s.wall))
				samples[i] = append(samples[i], s)
			}
		}
		for i, p := range procs {
			fin, err := p.finish()
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("%s at %d locks: %w", p.impl, n, err)
			}
			r := summarize(p.impl, n, samples[i])
			r.BytesPerLock, r.KeyValueBytes, r.PeakRSSMB, r.Note = fin.BytesPerLock, fin.KeyValueBytes, fin.PeakRSSMB, fin.Note
			out[p.impl] = r
		}
		closeAll()
	}
	var rs []result
	lw, haveLW := out["lockwatch"]
	for _, impl := range cfg.impls {
		r := out[impl]
		if impl != "lockwatch" && haveLW && lw.SweepMS > 0 {
			r.Speedup = r.SweepMS / lw.SweepMS
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// caseProc is one case set up in a child process, driven line by line:
// "sweep" answers a sample, "done" the case's other figures.
type caseProc struct {
	impl string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	errb *bytes.Buffer
}

func startCase(ctx context.Context, addr, impl string, n int) (*caseProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := &caseProc{impl: impl, errb: &bytes.Buffer{}}
	p.cmd = exec.CommandContext(ctx, exe, "-child", impl, "-n", strconv.Itoa(n), "-redis", addr,
		"-per-lock-pool-timeout", perLockPoolTimeout.String())
	p.cmd.Stderr = p.errb
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p.out = bufio.NewScanner(stdout)
	p.out.Buffer(make([]byte, 1<<16), 1<<20)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	var ready struct {
		Ready bool   `json:"ready"`
		Error string `json:"error"`
	}
	if err := p.read(&ready); err != nil {
		p.kill()
		return nil, err
	}
	if !ready.Ready {
		p.kill()
		return nil, errors.New(ready.Error)
	}
	return p, nil
}

func (p *caseProc) read(into any) error {
	if !p.out.Scan() {
		err := p.out.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: %w: %s", p.impl, err, strings.TrimSpace(p.errb.String()))
	}
	return json.Unmarshal(p.out.Bytes(), into)
}

func (p *caseProc) sweep() (sample, error) {
	if _, err := io.WriteString(p.in, "sweep\n"); err != nil {
		return sample{}, err
	}
	var s sampleJSON
	if err := p.read(&s); err != nil {
		return sample{}, err
	}
	if s.Error != "" {
		return sample{}, errors.New(s.Error)
	}
	return sample{time.Duration(s.WallNS), time.Duration(s.ClientCPUNS), time.Duration(s.ServerCPUNS), s.Failed, s.Nodes}, nil
}

func (p *caseProc) finish() (result, error) {
	if _, err := io.WriteString(p.in, "done\n"); err != nil {
		return result{}, err
	}
	var r result
	err := p.read(&r)
	return r, err
}

func (p *caseProc) kill() {
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// spawnJSON runs a one-shot child and decodes its single JSON answer.
func spawnJSON(ctx context.Context, args []string, into any) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(errOut.String()))
	}
	if err := json.Unmarshal(out.Bytes(), into); err != nil {
		return fmt.Errorf("child output %q: %w", out.String(), err)
	}
	return nil
}

// runChild runs one case in this process: "fault" answers once; the others
// set up, answer {"ready":true}, then a sample per "sweep" line and their
// figures on "done" (or when stdin ends).
func runChild(impl, addr string, n int, stdin io.Reader, stdout io.Writer) error {
	if addr == "" {
		return errors.New("-child needs -redis")
	}
	if n < 1 {
		return fmt.Errorf("-n %d: need a positive lock count", n)
	}
	ctx := context.Background()
	enc := json.NewEncoder(stdout)
	switch impl {
	case "fault":
		f, err := runFault(ctx, addr, n, 3)
		if err != nil {
			return err
		}
		return enc.Encode(f)
	case "memory-watched", "memory-unwatched":
		m, err := runMemory(ctx, addr, n, impl == "memory-watched")
		if err != nil {
			return err
		}
		return enc.Encode(m)
	}
	setup, ok := cases[impl]
	if impl == clusterCase {
		setup, ok = setupCluster, true
	}
	if !ok {
		return fmt.Errorf("-child: unknown case %q", impl)
	}
	b, err := setup(ctx, addr, casePrefix(impl), n)
	if err != nil {
		return enc.Encode(map[string]any{"ready": false, "error": err.Error()})
	}
	defer b.close()
	if err := enc.Encode(map[string]bool{"ready": true}); err != nil {
		return err
	}
	in := bufio.NewScanner(stdin)
	for in.Scan() {
		switch in.Text() {
		case "sweep":
			s, err := b.sweep(ctx)
			out := sampleJSON{WallNS: int64(s.wall), ClientCPUNS: int64(s.clientCPU), ServerCPUNS: int64(s.serverCPU), Failed: s.failed, Nodes: s.nodes}
			if err != nil {
				out.Error = err.Error()
			}
			if err := enc.Encode(out); err != nil {
				return err
			}
		case "done":
			r := b.finish()
			r.PeakRSSMB = peakRSSMB()
			return enc.Encode(r)
		default:
			return fmt.Errorf("-child: unknown request %q", in.Text())
		}
	}
	return in.Err()
}

// casePrefix gives each case's keys their own prefix of the same length,
// so that cases set up side by side share a server without sharing keys.
func casePrefix(impl string) string {
	switch impl {
	case "lockwatch":
		return "lw"
	case "per-lock":
		return "pl"
	case "redisson-style":
		return "rs"
	case "ceiling":
		return "ce"
	case clusterCase:
		return "cl"
	}
	return "xx"
}

func printTable(w io.Writer, rep report) {
	e := rep.Env
	fmt.Fprintf(w, "lockwatch-bench: Redis %s at %s, %s, %s, %d CPUs; median of %d sweeps\n\n",
		e.Redis, e.Addr, e.Go, e.OS, e.CPUs, e.Sweeps)
	printCases(w, rep.Cases)
	h := rep.Hook
	fmt.Fprintf(w, "\nhook: GET %.1f ns watched vs %.1f ns unwatched (+%.1f ns), SET %.1f vs %.1f ns (+%.1f ns); overhead %.1f ns, %.0f allocs/op (median of %d rounds)\n",
		h.GetNS[0], h.GetNS[1], h.GetOverNS, h.SetNS[0], h.SetNS[1], h.SetOverNS, h.OverheadNS, h.AllocsPerOp, h.Rounds)
	printCluster(w, rep.Cluster)
	printMemory(w, rep.Memory)
	if f := rep.Fault; f != nil {
		printFault(w, *f)
	}
}

// ratio prints a ratio, or "-" when there is none.
func ratio(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// newTable returns a writer that aligns tab-separated columns to the right.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

// printCases prints the sweep cases' table.
func printCases(w io.Writer, cs []result) {
	if len(cs) == 0 {
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "locks\tcase\tsweep ms\trenewals/s\tclient CPU ms\tserver CPU ms\twall/server CPU\tB/lock\tB/lock beyond key+value\tpeak RSS MB\tlockwatch faster\t")
	for _, r := range cs {
		speed := "-"
		if r.Speedup > 0 {
			speed = fmt.Sprintf("%.2fx", r.Speedup)
		}
		beyond := r.BytesPerLock - r.KeyValueBytes
		if r.Impl == "per-lock" {
			beyond = r.BytesPerLock // the key and value are the application's Lock's
		}
		fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.0f\t%.1f\t%.1f\t%s\t%.0f\t%.0f\t%.0f\t%s\t\n",
			r.Locks, r.Impl, r.SweepMS, r.RenewalsPerSec, r.ClientCPUMS, r.ServerCPUMS, ratio(r.WallOverServerCPU),
			r.BytesPerLock, beyond, r.PeakRSSMB, speed)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "  wall/server CPU: each sweep's wall time over the Redis CPU time measured across it (INFO cpu before and after), median over the sweeps; 1.00 = Redis busy the whole sweep")
	for _, r := range cs {
		if r.Note != "" {
			fmt.Fprintf(w, "  %s at %d: %s\n", r.Impl, r.Locks, r.Note)
		}
		if r.FailedRenewals > 0 {
			fmt.Fprintf(w, "  %s at %d: %.0f of %d renewals failed in a sweep (median)\n", r.Impl, r.Locks, r.FailedRenewals, r.Locks)
		}
	}
}
