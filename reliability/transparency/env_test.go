package transparency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// mode says whether a run's clients are watched.
type mode string

const (
	unwatched mode = "unwatched"
	watched   mode = "watched"
)

// schedule is the watchdog's schedule in the watched runs. robfig/cron
// runs "@every" at whole seconds at most once a second; locks whose TTL is
// short against it are renewed by the fast lane.
const schedule = "@every 1s"

// run is one pass of a scenario: the application's clients (one per
// server; watched or not), unwatched admin clients for looking at and
// interfering with the servers, and the record of what the application
// observed.
type run struct {
	t       *testing.T
	mode    mode
	ctx     context.Context
	prefix  string          // every key of the run starts with it
	clients []*redis.Client // the application's
	admin   []*redis.Client // never watched
	reg     *registry.Registry
	wd      *watchdog.Watchdog

	log     []string // observations that must be equal in both runs
	differs []string // observations that must differ, as expected

	dead map[int]bool // servers that refuse connections, by index

	lostMu sync.Mutex // guards lost
	lost   []string   // OnLost reports in the watched run
}

// both runs scenario against servers real redis-servers (plus dead ones,
// that refuse connections), first unwatched, then watched, and fails t
// unless the two runs observed the same.
func both(t *testing.T, servers, dead int, scenario func(r *run)) {
	t.Helper()
	var addrs []string
	for range servers {
		addrs = append(addrs, testredis.Start(t).Addr)
	}
	down := map[int]bool{}
	for range dead {
		down[len(addrs)] = true
		addrs = append(addrs, deadAddr(t))
	}
	start := time.Now()
	var logs [2][]string
	for i, m := range []mode{unwatched, watched} {
		r := newRun(t, m, addrs)
		r.dead = down
		scenario(r)
		r.close()
		logs[i] = r.log
		if len(r.lost) > 0 {
			t.Logf("%s run: OnLost reported %v", m, r.lost)
		}
		if len(r.differs) > 0 {
			t.Logf("%s run: expected differences: %v", m, r.differs)
		}
	}
	if !slices.Equal(logs[0], logs[1]) {
		t.Errorf("the watched run observed otherwise than the unwatched run:\n%s", diff(logs[0], logs[1]))
	}
	t.Logf("%d observations equal in both runs (%v)", len(logs[0]), time.Since(start).Round(time.Millisecond))
}

// deadAddr returns a loopback address nothing listens on, for as long as
// t runs (see reservePort).
func deadAddr(t *testing.T) string {
	t.Helper()
	port, err := reservePort(t)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func newRun(t *testing.T, m mode, addrs []string) *run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	r := &run{t: t, mode: m, ctx: ctx, prefix: fmt.Sprintf("%s:%s:", t.Name(), m)}
	newClient := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	for _, a := range addrs {
		r.clients = append(r.clients, newClient(a))
		r.admin = append(r.admin, newClient(a))
	}
	if m == watched {
		r.reg = harness.Watch(t, r.clients...)
		wd, err := watchdog.Attach(r.reg,
			watchdog.WithSchedule(schedule),
			watchdog.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
			watchdog.WithOnLost(func(l registry.Lock, err error) {
				r.lostMu.Lock()
				defer r.lostMu.Unlock()
				r.lost = append(r.lost, fmt.Sprintf("%s: %v", strings.TrimPrefix(l.Key, r.prefix), err))
			}))
		if err != nil {
			t.Fatalf("watchdog.Attach: %v", err)
		}
		r.wd = wd
	}
	return r
}

func (r *run) close() {
	if r.wd != nil {
		r.wd.Stop()
	}
}

// key returns the run's key for name.
func (r *run) key(name string) string { return r.prefix + name }

// note records one observation.
func (r *run) note(step, format string, args ...any) {
	r.log = append(r.log, step+": "+fmt.Sprintf(format, args...))
}

// wantErr records the kind of err and fails the test unless it is want.
func (r *run) wantErr(step string, err error, want string) {
	r.t.Helper()
	got := errKind(err)
	r.note(step, "err %s", got)
	if got != want {
		r.t.Errorf("%s run: %s: err %v (%s), want %s", r.mode, step, err, got, want)
	}
}

// wantErrOneOf is wantErr for a step whose error differs between upstream
// releases: the kind must be one of want (and, as always, the same in both
// runs).
func (r *run) wantErrOneOf(step string, err error, want ...string) {
	r.t.Helper()
	got := errKind(err)
	r.note(step, "err %s", got)
	if !slices.Contains(want, got) {
		r.t.Errorf("%s run: %s: err %v (%s), want one of %q", r.mode, step, err, got, want)
	}
}

// wantErrIs is wantErr for a step whose error is wrapped or joined
// differently by the upstream releases, or by timing: it records whether
// err matches target (errors.Is; the same in both runs, as always), and
// fails the test unless it does; targetName names target.
func (r *run) wantErrIs(step string, err, target error, targetName string) {
	r.t.Helper()
	got := errKind(err)
	// What is recorded is the match, not err's shape: upstream's shape may
	// depend on timing. redislock v0.10.0 returns the context's error
	// alone when the context ends during a command, and joins it to
	// ErrNotObtained when it ends during a backoff (CI run 114, under
	// load: one of each in the two runs).
	r.note(step, "err matches %s: %v", targetName, errors.Is(err, target))
	if !errors.Is(err, target) {
		r.t.Errorf("%s run: %s: err %v (%s), want one that matches %s", r.mode, step, err, got, targetName)
	}
}

// cleanup checks err of a step only one of the runs takes (a clean-up that
// depends on an expected difference) without recording it.
func (r *run) cleanup(step string, err error, want string) {
	r.t.Helper()
	if got := errKind(err); got != want {
		r.t.Errorf("%s run: %s: err %v (%s), want %s", r.mode, step, err, got, want)
	}
}

// want records got and fails the test unless it equals want.
func (r *run) want(step string, got, want any) {
	r.t.Helper()
	r.note(step, "%v", got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		r.t.Errorf("%s run: %s = %v, want %v", r.mode, step, got, want)
	}
}

// wantNear records whether got is within tol of want, and fails the test
// unless it is.
func (r *run) wantNear(step string, got, want, tol time.Duration) {
	r.t.Helper()
	near := got >= want-tol && got <= want+tol
	r.note(step, "near %v: %v", want, near)
	if !near {
		r.t.Errorf("%s run: %s = %v, want %v ± %v", r.mode, step, got, want, tol)
	}
}

// wantByMode records an observation that must differ between the runs:
// got must equal ifUnwatched in the unwatched run and ifWatched in the
// watched one.
func (r *run) wantByMode(step string, got, ifUnwatched, ifWatched any) {
	r.t.Helper()
	want := ifUnwatched
	if r.mode == watched {
		want = ifWatched
	}
	r.differs = append(r.differs, fmt.Sprintf("%s: %v", step, got))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		r.t.Errorf("%s run: %s = %v, want %v", r.mode, step, got, want)
	}
}

// keys records, server by server, the run's keys (without the prefix) and
// their values, values named by who holds them where the scenario knows
// (owners maps a value to a name; other values are shown as "?").
func (r *run) keys(step string, owners map[string]string) {
	r.t.Helper()
	var all []string
	for i, c := range r.admin {
		if r.dead[i] {
			continue
		}
		ks, err := c.Keys(r.ctx, r.prefix+"*").Result()
		if err != nil {
			r.t.Fatalf("KEYS on server %d: %v", i, err)
		}
		sort.Strings(ks)
		for _, k := range ks {
			v, err := c.Get(r.ctx, k).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				r.t.Fatalf("GET %s on server %d: %v", k, i, err)
			}
			name, ok := owners[v]
			if !ok {
				name = "?"
			}
			all = append(all, fmt.Sprintf("%d/%s=%s", i, strings.TrimPrefix(k, r.prefix), name))
		}
	}
	r.note(step, "keys %v", all)
}

// pttl returns the PTTL of the run's key name on server i.
func (r *run) pttl(i int, name string) time.Duration {
	r.t.Helper()
	d, err := r.admin[i].PTTL(r.ctx, r.key(name)).Result()
	if err != nil {
		r.t.Fatalf("PTTL %s on server %d: %v", name, i, err)
	}
	return d
}

// settle gives the watchdog of a watched run a sweep now, so that a
// renewal, if any would happen, has happened before the next observation.
func (r *run) settle() {
	r.t.Helper()
	if r.wd != nil {
		_ = r.wd.Sweep(r.ctx) // failures are the watchdog's to retry; the scenario observes the servers
	}
}

// wantTracked checks, in the watched run only and without recording it,
// that the registry tracks n locks: the watched run's difference comes from
// the watchdog renewing what the registry learnt.
func (r *run) wantTracked(n int) {
	r.t.Helper()
	if r.reg != nil {
		if got := r.reg.Len(); got != n {
			r.t.Errorf("watched run: the registry tracks %d locks, want %d: %v", got, n, r.reg.Locks())
		}
	}
}

// hold sleeps for d: the holder works while its lock's TTL passes.
func (r *run) hold(d time.Duration) { time.Sleep(d) }

// errSentinels are the errors errKind names an error by.
var errSentinels = append(slices.Clone(harness.UpstreamSentinels),
	harness.Sentinel{Name: "context.DeadlineExceeded", Err: context.DeadlineExceeded})

// errKind names err by the upstream sentinels and types it matches, so that
// errors compare across runs (messages carry random values and node order).
func errKind(err error) string {
	if err == nil {
		return "nil"
	}
	parts := harness.Matching(err, errSentinels...)
	var taken *redsync.ErrTaken
	if errors.As(err, &taken) {
		parts = append(parts, fmt.Sprintf("redsync.ErrTaken%v", sorted(taken.Nodes)))
	}
	// redsync joins the answers of its nodes: in a hashicorp multierror up
	// to v4.13, with errors.Join from v4.14 on.
	if leaves := flatten(err); len(leaves) > 1 || (len(leaves) == 1 && leaves[0] != err) {
		var nodes []string
		for _, e := range leaves {
			var nodeTaken *redsync.ErrNodeTaken
			var redisErr *redsync.RedisError
			switch {
			case errors.As(e, &nodeTaken):
				nodes = append(nodes, fmt.Sprintf("node %d taken", nodeTaken.Node))
			case errors.As(e, &redisErr):
				nodes = append(nodes, fmt.Sprintf("node %d unreachable", redisErr.Node))
			case errors.Is(e, redsync.ErrLockAlreadyExpired):
				nodes = append(nodes, "a node's lock expired")
			default:
				nodes = append(nodes, fmt.Sprintf("%T", e))
			}
		}
		sort.Strings(nodes)
		parts = append(parts, fmt.Sprintf("nodes%q", nodes))
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%T(%v)", err, err))
	}
	return strings.Join(parts, "+")
}

// flatten returns the errors a multierror (WrappedErrors) or errors.Join
// (Unwrap() []error) holds, recursively; any other error is its own leaf.
func flatten(err error) []error {
	var list []error
	switch e := err.(type) {
	case interface{ WrappedErrors() []error }:
		list = e.WrappedErrors()
	case interface{ Unwrap() []error }:
		list = e.Unwrap()
	default:
		return []error{err}
	}
	var out []error
	for _, x := range list {
		out = append(out, flatten(x)...)
	}
	return out
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// diff lists the observations where two records part.
func diff(a, b []string) string {
	var out strings.Builder
	for i := range max(len(a), len(b)) {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			fmt.Fprintf(&out, "  #%d unwatched: %s\n  #%d watched:   %s\n", i, x, i, y)
		}
	}
	return out.String()
}
