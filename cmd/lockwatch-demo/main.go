// Command lockwatch-demo shows lockwatch keeping two Redis locks alive through
// a job that runs longer than three of their TTLs.
//
// The job holds a github.com/bsm/redislock lock with a 2s TTL and a
// github.com/go-redsync/redsync/v4 mutex at redsync's default 8s expiry,
// taken through a go-redis client the registry watches. With redislock
// v0.10.0 or newer linked, it also holds a lock over three keys
// (ObtainMulti), which the registry tracks as one lock and the watchdog
// renews all or none; the demo lists the tracked locks with their keys. The watchdog runs
// with its default "@every 10s" schedule, so both locks are kept alive by
// its fast lane between ticks. Meanwhile a contender, on a client of its own,
// keeps trying to take both locks. Once a second the demo prints each key's
// remaining TTL (PTTL, read through an unwatched client), the watchdog's
// renewals of it and the contender's attempts. When the job ends it releases
// both locks, the contender takes them, and a summary follows.
//
// The demo checks as it goes that the contender never obtains a lock the job
// holds, that no held lock's remaining TTL falls below a third of its TTL,
// that the watchdog reports no lock lost, that no key comes back after its
// release, and that the contender obtains both locks once they are released.
// It exits 0 when every check held and 1 otherwise. A remaining TTL
// sampled after this process or Redis stood still for a third of the TTL
// is printed as a note, not counted: the watchdog keeps that third only
// while both run.
//
// The job runs under the context the watchdog hands it for its redislock
// lock (Watchdog.Context). With -steal, a third into the job another client
// overwrites that lock's key with its own value: the watchdog's next
// renewal finds it taken, the job's context is cancelled with
// watchdog.ErrLockTaken as its cause, and the job stops; the demo exits 0
// when it does.
//
// Usage:
//
//	lockwatch-demo [-redis host:port] [-duration 25s] [-steal] [-http host:port] [-v]
//
// Without -redis it starts an embedded miniredis whose TTLs run on the wall
// clock. With -redis it uses that server, under key names unique to the run,
// and deletes its keys at the end. -http serves, while the demo runs, the
// watchdog's counters at /metrics in Prometheus's text format (the names
// extra/lockwatchprom gives them) and its debug page at /debug/lockwatch.
// -v logs the watchdog to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

const (
	defaultDuration  = 25 * time.Second
	defaultReportTTL = 2 * time.Second
	redsyncExpiry    = 8 * time.Second // redsync's default; the demo does not change it
	opTimeout        = 2 * time.Second // bound on each of the demo's own Redis calls
	contenderTries   = 1               // the contender's redsync mutex tries once per attempt
	defaultPrintStep = time.Second
)

// config is what one run of the demo does. Flags set the first three
// fields; tests also shorten the others.
type config struct {
	redisAddr string        // "" starts an embedded miniredis
	duration  time.Duration // how long the job holds both locks
	verbose   bool          // log the watchdog to logOut
	steal     bool          // a thief overwrites the report lock a third into the job
	httpAddr  string        // "" serves nothing; else /metrics and /debug/lockwatch there

	reportTTL     time.Duration     // TTL of the redislock lock
	invoiceExpiry time.Duration     // expiry of the redsync mutex; 0 keeps redsync's default
	every         time.Duration     // status line period
	sample        time.Duration     // PTTL sampling period
	contendEvery  time.Duration     // pause between the contender's attempts
	settle        time.Duration     // wait after release before checking the keys stay gone
	extra         []watchdog.Option // appended to the watchdog's options (tests use it to break things)

	out, logOut io.Writer
}

func defaultConfig() config {
	return config{
		duration:     defaultDuration,
		reportTTL:    defaultReportTTL,
		every:        defaultPrintStep,
		sample:       100 * time.Millisecond,
		contendEvery: 250 * time.Millisecond,
		settle:       time.Second,
		out:          os.Stdout,
		logOut:       os.Stderr,
	}
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockwatch-demo:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err = run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockwatch-demo:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("lockwatch-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.redisAddr, "redis", "", "use the Redis server at `host:port` instead of an embedded miniredis")
	fs.DurationVar(&cfg.duration, "duration", defaultDuration, "how long the job holds the locks")
	fs.BoolVar(&cfg.verbose, "v", false, "log the watchdog through slog to stderr")
	fs.StringVar(&cfg.httpAddr, "http", "", "serve /metrics (Prometheus text format) and the debug page /debug/lockwatch on `host:port` while the demo runs")
	fs.BoolVar(&cfg.steal, "steal", false, "a third into the job, another client overwrites the redislock lock's key with its own value: the job must stop, its context cancelled with ErrLockTaken")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lockwatch-demo [-redis host:port] [-duration 25s] [-steal] [-http host:port] [-v]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.duration <= 0 {
		return cfg, fmt.Errorf("-duration %v: must be positive", cfg.duration)
	}
	return cfg, nil
}

// held is one lock the job holds, as the checks see it.
type held struct {
	name, key, source string // name labels the status line
	ttl               time.Duration
}

// result is what a run observed.
type result struct {
	Keys     []string         // the lock keys, report first
	Held     time.Duration    // how long the job held them
	Renewals map[string]int64 // per key, the watchdog's renewals just before release
	Stats    watchdog.Stats   // after Stop
	Attempts int64            // the contender's attempts while the job held the locks
	Wins     int64            // of those, how many obtained a lock (should be 0)
	Broken   []string         // each check that broke, first occurrence, with a count
	NBroken  int              // how many times checks broke in all
	Stopped  error            // with -steal: why the job's context ended (ErrLockTaken expected)
}

// demo is one run's shared state.
type demo struct {
	cfg      config
	out      io.Writer
	checks   *checker
	observer *redis.Client // reads PTTL and EXISTS; never locks
	reg      *registry.Registry
	wd       *watchdog.Watchdog
	locks    []held // report, invoice
	c        *contender
	batch    *batch          // a lock over several keys; nil with a redislock that cannot take one
	jobCtx   context.Context // the job's context: ends when the report lock is no longer held
	stalls   *stallMeter     // how long this process or Redis stood still
	stolen   atomic.Bool     // with -steal: the thief has overwritten the report lock's key
	thief    *redis.Client   // with -steal: the client that overwrites it
}

// run runs the demo once and returns an error when a check broke, the run
// was interrupted or it could not start.
func run(ctx context.Context, cfg config) (result, error) {
	var res result
	out := &syncWriter{w: cfg.out}
	d := &demo{cfg: cfg, out: out, checks: &checker{out: out}}
	job, contender, prefix, closeRedis, err := d.connect(ctx)
	if err != nil {
		return res, err
	}
	defer closeRedis()
	d.stalls = startStallMeter(stallTick, func(ctx context.Context) error { return d.observer.Ping(ctx).Err() })
	defer d.stalls.Stop()
	mutexOpts := d.plan(prefix)
	res.Keys = []string{d.locks[0].key, d.locks[1].key}
	if cfg.redisAddr != "" {
		defer d.del(ctx, res.Keys)
	}
	// Start-up, as an application does it.
	stop, err := d.startUp(job)
	if err != nil {
		return res, err
	}
	defer stop()
	// Unchanged business code: take the locks.
	report, invoice, err := d.obtain(ctx, job, prefix, mutexOpts)
	if err != nil {
		return res, err
	}
	if d.batch != nil && cfg.redisAddr != "" {
		defer d.del(ctx, d.batch.keys)
	}
	interrupted := d.work(ctx, contender, mutexOpts, &res)
	// Unchanged business code: release the locks.
	d.release(ctx, report, invoice)
	d.afterRelease(ctx)
	d.wd.Stop()
	res.Stats = d.wd.Stats()
	res.Broken, res.NBroken = d.checks.list()
	printSummary(out, d.locks, d.batch, res)
	switch {
	case res.NBroken > 0:
		return res, fmt.Errorf("%d check(s) broke; first: %s", res.NBroken, res.Broken[0])
	case interrupted:
		return res, errors.New("interrupted before the job ended")
	}
	return res, nil
}

// connect starts the embedded miniredis unless -redis names a server, and
// makes the job's client (the one the registry watches), the contender's
// and the observer's. It returns the prefix of the demo's keys and a
// function that closes what it opened.
func (d *demo) connect(ctx context.Context) (job, contender *redis.Client, prefix string, closeAll func(), err error) {
	addr, prefix := d.cfg.redisAddr, "demo:"
	var m *miniredis.Miniredis
	if addr == "" {
		m = miniredis.NewMiniRedis()
		m.ClockTTL(true) // TTLs run on the wall clock, as on a real server
		if err := m.Start(); err != nil {
			return nil, nil, "", nil, fmt.Errorf("start miniredis: %w", err)
		}
		addr = m.Addr()
	} else {
		prefix = uniquePrefix()
	}
	job = redis.NewClient(&redis.Options{Addr: addr})       // watched: the business code's client
	contender = redis.NewClient(&redis.Options{Addr: addr}) // another process, in effect
	d.observer = redis.NewClient(&redis.Options{Addr: addr})
	closeAll = func() {
		closeClients(job, contender, d.observer)
		if m != nil {
			m.Close()
		}
	}
	if err := call(ctx, func(ctx context.Context) error { return d.observer.Ping(ctx).Err() }); err != nil {
		closeAll()
		return nil, nil, "", nil, fmt.Errorf("redis at %s: %w", addr, err)
	}
	return job, contender, prefix, closeAll, nil
}

// plan names the two locks the job holds and returns the options of the
// redsync mutex.
func (d *demo) plan(prefix string) []redsync.Option {
	invoiceTTL := redsyncExpiry
	var mutexOpts []redsync.Option
	if d.cfg.invoiceExpiry > 0 {
		invoiceTTL = d.cfg.invoiceExpiry
		mutexOpts = append(mutexOpts, redsync.WithExpiry(invoiceTTL))
	}
	d.locks = []held{
		{"report", prefix + "report", "redislock", d.cfg.reportTTL},
		{"invoice", prefix + "invoice", "redsync", invoiceTTL},
	}
	return mutexOpts
}

// del deletes keys on a real server at the end of a run.
func (d *demo) del(ctx context.Context, keys []string) {
	_ = call(ctx, func(ctx context.Context) error { return d.observer.Del(ctx, keys...).Err() })
}

// startUp is the three lines an application adds: a registry watching the
// job's client, and a watchdog attached to it (and, with -http, its debug
// page and metrics served). It returns what stops them.
func (d *demo) startUp(job *redis.Client) (stop func(), err error) {
	d.reg = registry.New(bsmredislock.New(), goredsync.New())
	if err := d.reg.Watch(job); err != nil {
		return nil, err
	}
	logger := slog.New(slog.DiscardHandler)
	if d.cfg.verbose {
		logger = slog.New(slog.NewTextHandler(d.cfg.logOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts := append([]watchdog.Option{watchdog.WithLogger(logger), watchdog.WithOnLost(d.onLost)}, d.cfg.extra...)
	wd, err := watchdog.Attach(d.reg, opts...)
	if err != nil {
		return nil, err
	}
	d.wd = wd
	if d.cfg.httpAddr == "" {
		return wd.Stop, nil
	}
	stopHTTP, err := serveHTTP(d.cfg.httpAddr, wd, d.out)
	if err != nil {
		wd.Stop()
		return nil, err
	}
	return func() { stopHTTP(); wd.Stop() }, nil
}

// onLost is the demo's OnLost: a loss breaks a check, but the one -steal
// causes.
func (d *demo) onLost(l registry.Lock, err error) {
	if d.stolen.Load() && l.Key == d.locks[0].key && errors.Is(err, watchdog.ErrLockTaken) {
		fmt.Fprintf(d.out, "watchdog: reported %s lost: %v\n", l.Key, err)
		return // what -steal does
	}
	d.checks.add("lost "+l.Key, fmt.Errorf("%s: the watchdog reported it lost: %w", l.Key, err))
}

// obtain takes the report lock (redislock), the invoice mutex (redsync)
// and, when redislock can, the batch lock over several keys.
func (d *demo) obtain(ctx context.Context, job *redis.Client, prefix string, mutexOpts []redsync.Option) (*redislock.Lock, *redsync.Mutex, error) {
	var report *redislock.Lock
	if err := call(ctx, func(ctx context.Context) (err error) {
		report, err = redislock.New(job).Obtain(ctx, d.locks[0].key, d.locks[0].ttl, nil)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("obtain %s: %w", d.locks[0].key, err)
	}
	invoice := redsync.New(goredis.NewPool(job)).NewMutex(d.locks[1].key, mutexOpts...)
	if err := invoice.LockContext(ctx); err != nil {
		_ = call(ctx, report.Release)
		return nil, nil, fmt.Errorf("lock %s: %w", d.locks[1].key, err)
	}
	if err := d.obtainBatch(ctx, redislock.New(job), prefix); err != nil {
		_ = call(ctx, report.Release)
		_, _ = invoice.UnlockContext(ctx)
		return nil, nil, fmt.Errorf("obtain the batch lock: %w", err)
	}
	fmt.Fprintf(d.out, "job: holding %s (redislock, TTL %v) and %s (redsync, expiry %v) for %v; watchdog schedule %s\n",
		d.locks[0].key, d.locks[0].ttl, d.locks[1].key, d.locks[1].ttl, d.cfg.duration, watchdog.DefaultSchedule)
	d.printTracked()
	return report, invoice, nil
}

// work runs the job under a context that ends when its lock is no longer
// held, while the contender tries to take the locks; it reports whether
// the run was interrupted.
func (d *demo) work(ctx context.Context, contender *redis.Client, mutexOpts []redsync.Option, res *result) (interrupted bool) {
	jobCtx, cancelJob := d.wd.Context(ctx, d.locks[0].key)
	defer cancelJob()
	d.jobCtx = jobCtx
	d.thief = contender
	if longest := max(d.locks[0].ttl, d.locks[1].ttl); d.cfg.duration < 3*longest {
		fmt.Fprintf(d.out, "note: -duration %v is shorter than three TTLs of the longest lock (%v); the checks still run\n", d.cfg.duration, 3*longest)
	}
	// The contender tries to take both locks until the job releases them.
	d.c = newContender(contender, d.locks, d.cfg.reportTTL, mutexOpts)
	cctx, stopContender := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.c.contend(cctx, d.cfg.contendEvery, d.checks)
	}()
	start := time.Now()
	interrupted = d.hold(ctx, start)
	res.Held = time.Since(start).Round(100 * time.Millisecond)
	stopContender()
	wg.Wait()
	res.Attempts, res.Wins = d.c.attempts.Load(), d.c.wins.Load()
	res.Renewals = renewalsOf(d.reg)
	if d.cfg.steal {
		res.Stopped = context.Cause(jobCtx)
		switch {
		case jobCtx.Err() == nil:
			d.checks.add("steal", fmt.Errorf("%s: overwritten by another client, but the job's context was never cancelled", d.locks[0].key))
		case !errors.Is(res.Stopped, watchdog.ErrLockTaken):
			d.checks.add("steal", fmt.Errorf("%s: the job's context ended with %v, want ErrLockTaken", d.locks[0].key, res.Stopped))
		}
	}
	return interrupted
}

// release releases the locks, as business code does, and checks that
// each release found its lock held (but the one -steal took).
func (d *demo) release(ctx context.Context, report *redislock.Lock, invoice *redsync.Mutex) {
	if d.batch != nil {
		if err := call(ctx, d.batch.lock.Release); err != nil {
			d.checks.add("release batch", fmt.Errorf("%v: release failed, so the lock was lost while held: %w", d.batch.keys, err))
		}
	}
	if err := call(ctx, report.Release); d.cfg.steal {
		if !errors.Is(err, redislock.ErrLockNotHeld) {
			d.checks.add("release", fmt.Errorf("%s: release of the stolen lock = %v, want ErrLockNotHeld", d.locks[0].key, err))
		}
	} else if err != nil {
		d.checks.add("release", fmt.Errorf("%s: release failed, so the lock was lost while held: %w", d.locks[0].key, err))
	}
	if err := call(ctx, func(ctx context.Context) error {
		ok, err := invoice.UnlockContext(ctx)
		if err == nil && !ok {
			err = redsync.ErrLockAlreadyExpired
		}
		return err
	}); err != nil {
		d.checks.add("unlock", fmt.Errorf("%s: unlock failed, so the lock was lost while held: %w", d.locks[1].key, err))
	}
}
