package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

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
	s := &session{cfg: cfg, addr: addr, obs: obs, stderr: stderr}
	if err := s.measure(ctx); err != nil {
		return err
	}
	_ = obs.FlushAll(ctx).Err()
	if cfg.asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(s.rep)
	}
	printTable(stdout, s.rep)
	return nil
}

// session is the parent's run on one server: obs observes it, and rep is
// filled step by step.
type session struct {
	cfg    config
	addr   string
	obs    *redis.Client
	stderr io.Writer
	rep    report
}

// measure fills the report: the server's environment, the hook overhead,
// then each case asked for, in the report's order, flushing the server
// after each.
func (s *session) measure(ctx context.Context) error {
	si, err := readInfo(ctx, s.obs)
	if err != nil {
		return fmt.Errorf("redis at %s: %w", s.addr, err)
	}
	s.rep.Env = envInfo{
		Redis: si.version, Addr: s.addr, Go: runtime.Version(), CPUs: runtime.NumCPU(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, Sweeps: s.cfg.sweeps, StartedAt: time.Now().UTC().Format(time.RFC3339),
	}

	fmt.Fprintf(s.stderr, "hook overhead: %d rounds\n", s.cfg.hookRun)
	if s.rep.Hook, err = measureHook(s.cfg.hookRun); err != nil {
		return fmt.Errorf("hook: %w", err)
	}
	for _, step := range []func(context.Context) error{
		s.sweepsStep, s.memoryStep, s.neighbourStep, s.stormStep, s.clientsStep, s.clusterStep, s.faultStep,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// flush empties the server between cases.
func (s *session) flush(ctx context.Context) error {
	if err := s.obs.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	return nil
}

// sweepsStep measures the sweep cases at each lock count.
func (s *session) sweepsStep(ctx context.Context) error {
	for _, n := range s.cfg.locks {
		if len(s.cfg.impls) == 0 {
			break
		}
		rs, err := measureAt(ctx, s.addr, n, s.cfg, s.stderr)
		if err != nil {
			return err
		}
		s.rep.Cases = append(s.rep.Cases, rs...)
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// memoryStep measures the memory case at each of its sizes.
func (s *session) memoryStep(ctx context.Context) error {
	if !s.cfg.memory {
		return nil
	}
	for _, n := range s.cfg.memLocks {
		fmt.Fprintf(s.stderr, "memory, %d locks, unwatched and watched side by side ...\n", n)
		m, err := measureMemory(ctx, s.addr, n)
		if err != nil {
			return fmt.Errorf("memory at %d locks: %w", n, err)
		}
		fmt.Fprintf(s.stderr, "memory, %d locks: obtained in %.1f s watched (%d sweeps meanwhile), %.1f s unwatched; lockwatch %.0f B/lock\n",
			n, m.ObtainMS/1000, m.SweepsWhileObtaining, m.UnwatchedObtainMS/1000, m.BytesPerLock)
		s.rep.Memory = append(s.rep.Memory, m)
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// neighbourStep measures the neighbour case.
func (s *session) neighbourStep(ctx context.Context) error {
	if !s.cfg.neighbour {
		return nil
	}
	var err error
	if s.rep.Neighbour, err = measureNeighbour(ctx, s.addr, s.stderr); err != nil {
		return fmt.Errorf("neighbour: %w", err)
	}
	return s.flush(ctx)
}

// stormStep measures the storm case.
func (s *session) stormStep(ctx context.Context) error {
	if !s.cfg.storm {
		return nil
	}
	var err error
	if s.rep.Storm, err = measureStorm(ctx, s.addr, s.obs, s.stderr); err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	return s.flush(ctx)
}

// clientsStep measures the clients case.
func (s *session) clientsStep(ctx context.Context) error {
	if !s.cfg.clients {
		return nil
	}
	fmt.Fprintf(s.stderr, "clients, %d clients, unwatched then watched ...\n", clientsCount)
	var err error
	if s.rep.Clients, err = measureClients(ctx, s.addr, clientsCount); err != nil {
		return fmt.Errorf("clients: %w", err)
	}
	return s.flush(ctx)
}

// clusterStep measures the cluster case.
func (s *session) clusterStep(ctx context.Context) error {
	if !s.cfg.cluster {
		return nil
	}
	var err error
	if s.rep.Cluster, err = measureCluster(ctx, s.addr, s.cfg.clusterLocks, s.cfg, s.stderr); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return s.flush(ctx)
}

// faultStep measures fault isolation at 10,000 locks.
func (s *session) faultStep(ctx context.Context) error {
	if !s.cfg.fault {
		return nil
	}
	n := 10_000
	if err := s.flush(ctx); err != nil {
		return err
	}
	fmt.Fprintf(s.stderr, "fault isolation, %d locks ...\n", n)
	f, err := spawnFault(ctx, s.addr, n)
	if err != nil {
		return fmt.Errorf("fault isolation: %w", err)
	}
	s.rep.Fault = &f
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
