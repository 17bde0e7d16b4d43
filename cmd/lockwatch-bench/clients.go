package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// The clients case (-cases clients) measures what each watched client
// costs: -clients go-redis clients, each holding one redislock lock, in a
// process where one registry watches them all and a watchdog sweeps them
// on clientsSchedule, against a process with the same clients and locks
// unwatched. The two processes run one after the other (the server's
// connection count is the server's, not a process's), each taking its
// figures against its own before it made the clients: the server's
// connected_clients (INFO clients), the heap in use (HeapInuse, and
// StackInuse for the goroutines' stacks) after two GCs, and the number of
// goroutines. Then each client obtains clientsMoreLocks more locks, and the
// connections and goroutines are counted again: they must not grow with
// the locks.
const (
	// clientsSchedule is the watched process's schedule.
	clientsSchedule = "@every 100ms"
	clientsPeriod   = 100 * time.Millisecond
	// clientsTicks is the least number of periods waited before the
	// figures are taken, and of sweeps of every client by then.
	clientsTicks = 3
	// clientsMoreLocks is how many more locks each client obtains for the
	// second count.
	clientsMoreLocks = 9
	// clientsTTL is the locks' TTL.
	clientsTTL = 30 * time.Second
	// Issue 21's budget per watched client.
	clientsBudgetConns = 1
	clientsBudgetBytes = 64 << 10
)

// defaultClients is -clients's default, and clientsCount its value.
const defaultClients = 300

var clientsCount = defaultClients

// clientsResult is the -json "clients" object.
type clientsResult struct {
	Clients   int          `json:"clients"`
	Schedule  string       `json:"schedule"`
	Watched   clientsChild `json:"watched"`
	Unwatched clientsChild `json:"unwatched"`
	// Per watched client, watched minus unwatched over the clients:
	// server connections, heap in use, heap and stacks, goroutines.
	ConnsPerClient       float64 `json:"conns_per_client"`
	HeapPerClient        float64 `json:"heap_bytes_per_client"`
	HeapStackPerClient   float64 `json:"heap_stack_bytes_per_client"`
	GoroutinesPerClient  float64 `json:"goroutines_per_client"`
	GoroutinesPerClient2 float64 `json:"goroutines_per_client_more_locks"`
	ConnsPerClient2      float64 `json:"conns_per_client_more_locks"`
	BudgetConns          float64 `json:"budget_conns_per_client"`
	BudgetBytes          float64 `json:"budget_bytes_per_client"`
}

// clientsChild is one process's answer: each figure is the growth from
// before the clients were made, with one lock a client; the More figures
// with 1+clientsMoreLocks locks a client.
type clientsChild struct {
	Conns          int64 `json:"conns"`
	Heap           int64 `json:"heap_bytes"`
	Stack          int64 `json:"stack_bytes"`
	Goroutines     int   `json:"goroutines"`
	MoreConns      int64 `json:"conns_more_locks"`
	MoreGoroutines int   `json:"goroutines_more_locks"`
	// Of the watched process: sweeps (one per client a tick) and renewals
	// when the first figures were taken, and locks tracked then.
	Sweeps   int64 `json:"sweeps"`
	Renewals int64 `json:"renewals"`
	Tracked  int   `json:"tracked"`
}

// connectedClients reads INFO clients connected_clients.
func connectedClients(ctx context.Context, c *redis.Client) (int64, error) {
	txt, err := c.Info(ctx, "clients").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO clients: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "connected_clients:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO clients: no connected_clients in %q", txt)
}

// memStats returns HeapInuse and StackInuse after two full GCs.
func memStats() (heap, stack int64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse), int64(ms.StackInuse)
}

// measureClients runs the unwatched process, then the watched one.
func measureClients(ctx context.Context, addr string, n int) (*clientsResult, error) {
	r := &clientsResult{Clients: n, Schedule: clientsSchedule, BudgetConns: clientsBudgetConns, BudgetBytes: clientsBudgetBytes}
	for _, k := range []struct {
		mode string
		into *clientsChild
	}{{"clients-unwatched", &r.Unwatched}, {"clients-watched", &r.Watched}} {
		if err := spawnJSON(ctx, []string{"-child", k.mode, "-n", strconv.Itoa(n), "-redis", addr}, k.into); err != nil {
			return nil, fmt.Errorf("%s: %w", k.mode, err)
		}
	}
	w, u, f := r.Watched, r.Unwatched, float64(n)
	r.ConnsPerClient = float64(w.Conns-u.Conns) / f
	r.HeapPerClient = float64(w.Heap-u.Heap) / f
	r.HeapStackPerClient = float64(w.Heap+w.Stack-u.Heap-u.Stack) / f
	r.GoroutinesPerClient = float64(w.Goroutines-u.Goroutines) / f
	r.GoroutinesPerClient2 = float64(w.MoreGoroutines-u.MoreGoroutines) / f
	r.ConnsPerClient2 = float64(w.MoreConns-u.MoreConns) / f
	return r, nil
}

// runClients is one process of the clients case.
func runClients(ctx context.Context, addr string, n int, watched bool) (clientsChild, error) {
	var out clientsChild
	p := &clientsProc{
		n: n, watched: watched,
		obs:   redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1}),
		stats: func() watchdog.Stats { return watchdog.Stats{} },
	}
	defer p.obs.Close()
	var err error
	if p.conns0, err = connectedClients(ctx, p.obs); err != nil {
		return out, err
	}
	heap0, stack0 := memStats()
	g0 := runtime.NumGoroutine()

	defer p.closeClients()
	if err := p.makeClients(addr); err != nil {
		return out, err
	}
	if watched {
		wd, err := watchdog.Attach(p.reg, watchdog.WithSchedule(clientsSchedule))
		if err != nil {
			return out, err
		}
		defer wd.Stop()
		p.stats = wd.Stats
	}
	p.prefix = "cu"
	if watched {
		p.prefix = "cw"
	}
	// locks holds every lock, so that the application's Lock values are
	// alike in both processes.
	p.locks = make([]*redislock.Lock, 0, n*(1+clientsMoreLocks))

	s0 := p.stats()
	if err := p.obtain(ctx, 1); err != nil {
		return out, err
	}
	if err := p.wait(s0); err != nil {
		return out, err
	}
	if out.Conns, err = p.count(ctx); err != nil {
		return out, err
	}
	heap, stack := memStats()
	out.Heap, out.Stack, out.Goroutines = heap-heap0, stack-stack0, steadyGoroutines()-g0
	s := p.stats()
	out.Sweeps, out.Renewals = s.Sweeps-s0.Sweeps, s.Renewals-s0.Renewals
	if watched {
		out.Tracked = p.reg.Len()
	}

	s1 := p.stats()
	if err := p.obtain(ctx, clientsMoreLocks); err != nil {
		return out, err
	}
	if err := p.wait(s1); err != nil {
		return out, err
	}
	if out.MoreConns, err = p.count(ctx); err != nil {
		return out, err
	}
	out.MoreGoroutines = steadyGoroutines() - g0
	runtime.KeepAlive(p.locks)
	return out, nil
}

// steadyGoroutines is the fewest goroutines seen in samples over two and
// a half schedule periods: those that stay, without the ones a sweep runs
// for its calls while it lasts (at one sweep per client every 100 ms, a
// single count on a busy machine caught one more goroutine a client: CI
// run 65).
func steadyGoroutines() int {
	least := runtime.NumGoroutine()
	for end := time.Now().Add(5 * clientsPeriod / 2); time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
		least = min(least, runtime.NumGoroutine())
	}
	return least
}

// clientsProc is one process of the clients case: its n clients, watched
// by reg or not, and the locks they hold.
type clientsProc struct {
	n       int
	watched bool
	// obs counts the server's connections, conns0 before the clients.
	obs    *redis.Client
	conns0 int64

	clients []*redis.Client
	reg     *registry.Registry // nil unwatched
	// stats are the watchdog's, zero unwatched.
	stats  func() watchdog.Stats
	prefix string
	locks  []*redislock.Lock
}

// makeClients makes the n clients, watched by a new registry in the
// watched process.
func (p *clientsProc) makeClients(addr string) error {
	p.clients = make([]*redis.Client, p.n)
	if p.watched {
		p.reg = registry.New(bsmredislock.New(), goredsync.New())
	}
	for i := range p.clients {
		p.clients[i] = redis.NewClient(&redis.Options{Addr: addr})
		if p.watched {
			if err := p.reg.Watch(p.clients[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *clientsProc) closeClients() {
	for _, c := range p.clients {
		if c != nil {
			_ = c.Close()
		}
	}
}

// obtain has each client obtain per more locks.
func (p *clientsProc) obtain(ctx context.Context, per int) error {
	got := make([][]*redislock.Lock, p.n)
	err := forEach(p.n, func(i int) error {
		lc := redislock.New(p.clients[i])
		for range per {
			key := lockKey(p.prefix, len(p.locks)+i*per+len(got[i]))
			l, err := lc.Obtain(ctx, key, clientsTTL, nil)
			if err != nil {
				return fmt.Errorf("obtain %s: %w", key, err)
			}
			got[i] = append(got[i], l)
		}
		return nil
	})
	for _, g := range got {
		p.locks = append(p.locks, g...)
	}
	return err
}

// wait waits clientsTicks periods and, watched, until every client was
// swept clientsTicks times more and every lock renewed since from.
func (p *clientsProc) wait(from watchdog.Stats) error {
	time.Sleep(clientsTicks * clientsPeriod)
	deadline := time.Now().Add(time.Minute)
	for p.watched {
		s := p.stats()
		if s.Sweeps-from.Sweeps >= int64(clientsTicks*p.n) && s.Renewals-from.Renewals >= int64(len(p.locks)) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after a minute: %d sweeps and %d renewals, want %d and %d",
				s.Sweeps-from.Sweeps, s.Renewals-from.Renewals, clientsTicks*p.n, len(p.locks))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// count is the server's connections beyond those before the clients.
func (p *clientsProc) count(ctx context.Context) (int64, error) {
	c, err := connectedClients(ctx, p.obs)
	return c - p.conns0, err
}

func printClients(w io.Writer, r *clientsResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\nclients: %d go-redis clients holding one redislock lock each, unwatched in one process, watched by one registry with a watchdog on %q in another (one after the other);\n",
		r.Clients, r.Schedule)
	fmt.Fprintf(w, "  each process's growth from before it made the clients: server connections (INFO connected_clients), heap in use and stacks after two GCs, goroutines; then with %d locks per client\n",
		1+clientsMoreLocks)
	tw := newTable(w)
	fmt.Fprintf(tw, "\tconnections\theap KB\tstacks KB\tgoroutines\tconnections at %d locks/client\tgoroutines at %d locks/client\t\n", 1+clientsMoreLocks, 1+clientsMoreLocks)
	for _, m := range []struct {
		label string
		c     clientsChild
	}{{"unwatched", r.Unwatched}, {"watched", r.Watched}} {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%d\t%d\t%d\t\n", m.label, m.c.Conns, float64(m.c.Heap)/1024, float64(m.c.Stack)/1024,
			m.c.Goroutines, m.c.MoreConns, m.c.MoreGoroutines)
	}
	_ = tw.Flush()
	ok := func(good bool) string {
		if good {
			return "ok"
		}
		return "OVER"
	}
	fmt.Fprintf(w, "  per watched client: %+.2f connections (%+.2f at %d locks/client; budget %.0f: %s), %+.1f KB heap (%+.1f KB with stacks; budget %.0f KB: %s), %+.2f goroutines (%+.2f at %d locks/client: %s)\n",
		r.ConnsPerClient, r.ConnsPerClient2, 1+clientsMoreLocks, r.BudgetConns, ok(max(r.ConnsPerClient, r.ConnsPerClient2) <= r.BudgetConns),
		r.HeapPerClient/1024, r.HeapStackPerClient/1024, r.BudgetBytes/1024, ok(r.HeapStackPerClient <= r.BudgetBytes),
		r.GoroutinesPerClient, r.GoroutinesPerClient2, 1+clientsMoreLocks,
		map[bool]string{true: "per endpoint, not per lock", false: "GROWS WITH THE LOCKS"}[perEndpoint(r)])
	fmt.Fprintf(w, "  watched process: %d sweeps and %d renewals before the figures, %d locks tracked\n", r.Watched.Sweeps, r.Watched.Renewals, r.Watched.Tracked)
}

// perEndpoint tells whether the watched process's goroutines did not grow
// with the locks: by fewer than one per client, where one per lock would
// add clientsMoreLocks per client.
func perEndpoint(r *clientsResult) bool {
	return r.Watched.MoreGoroutines-r.Watched.Goroutines < r.Clients
}
