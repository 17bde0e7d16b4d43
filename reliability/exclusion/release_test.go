package exclusion_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/scripts"
	"github.com/lockwatch/lockwatch/internal/testkit/harness"
	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
	"github.com/lockwatch/lockwatch/registry"
	lwscripts "github.com/lockwatch/lockwatch/scripts"
	"github.com/lockwatch/lockwatch/watchdog"
)

// Scenario 2 of the reliability suite.
const (
	rrCycles   = 10000
	rrWorkers  = 8
	rrTTL      = 5 * time.Second // long: a renewal pipeline is never given up (timeout TTL/4)
	rrMaxHold  = 3 * time.Millisecond
	rrSchedule = "@every 10ms"
	rrEvery    = 10 * time.Millisecond
)

// The release scripts of the supported upstreams, as SHA1 of their sources
// (redislock v0.9.4 luaRelease, redislock v0.10.0 release.lua; redsync
// v4.12.1 to v4.18.1 deleteScript). The adapters pin the same values; the
// test checks that every release it made shows up under one of them.
//
// Both redislock releases call their release script with the lock's keys
// as KEYS and its value as ARGV[1] (v0.9.4 always with one key; v0.10.0
// with every key of the lock), and both scripts read the keys (GET, MGET)
// before they delete anything.
const (
	redislockV094ReleaseSHA1 = "cf0e94b2e9ffc7e04395cf88f7583fc309985910"
	redislockV010ReleaseSHA1 = "9470c810040e272ee6c579d8d4331aaf6332a7b1"
	redsyncDeleteSHA1        = "e950836ed1e694540c503ef9972b8de518044d3b"
)

// isRedislockRelease reports whether sha is the release script of a
// supported redislock release.
func isRedislockRelease(sha string) bool {
	return sha == redislockV094ReleaseSHA1 || sha == redislockV010ReleaseSHA1
}

// releasedMarker starts the ECHO a worker sends after a release returned:
// "released <key> <value>". In the MONITOR stream everything after it was
// sent after the release returned.
const releasedMarker = "released"

type lockID struct{ key, value string }

type lostLock struct {
	id  lockID
	err error
}

// rrKind is how a cycle of TestReleaseRacingSweep locks.
type rrKind int

const (
	rrRedislock rrKind = iota // redislock Obtain
	rrRedsync                 // a redsync mutex
	rrMulti                   // redislock ObtainMulti over three keys (v0.10.0 and later)
)

// rrMultiObtainer is (*redislock.Client).ObtainMulti, which redislock
// v0.10.0 added; looked up at run time, as go.mod requires v0.9.4.
type rrMultiObtainer interface {
	ObtainMulti(ctx context.Context, keys []string, ttl time.Duration, opt *redislock.Options) (*redislock.Lock, error)
}

// rrObtain obtains key (and, for rrMulti, two more keys after it) and
// returns the keys, the value and the release.
func rrObtain(ctx context.Context, rdb *redis.Client, rs *redsync.Redsync, kind rrKind, key string) ([]string, string, func(context.Context) error, error) {
	switch kind {
	case rrRedislock, rrMulti:
		keys := []string{key}
		var (
			l   *redislock.Lock
			err error
		)
		if m, ok := any(redislock.New(rdb)).(rrMultiObtainer); ok && kind == rrMulti {
			keys = []string{key, key + ":2", key + ":3"}
			l, err = m.ObtainMulti(ctx, keys, rrTTL, nil)
		} else {
			l, err = redislock.Obtain(ctx, rdb, key, rrTTL, nil)
		}
		if err != nil {
			return nil, "", nil, err
		}
		h := harness.HeldRedislock(l, rrTTL)
		return keys, h.Value, h.Release, nil
	}
	m := rs.NewMutex(key, redsync.WithExpiry(rrTTL), redsync.WithTries(3))
	if err := m.LockContext(ctx); err != nil {
		return nil, "", nil, err
	}
	h := harness.HeldRedsync(m, rrTTL)
	return []string{key}, h.Value, h.Release, nil
}

// TestReleaseRacingSweep obtains and releases 10,000 locks (both libraries,
// and with redislock v0.10.0 a quarter of them ObtainMulti locks over three
// keys; eight goroutines, holds of 0-3 ms) while the watchdog sweeps every 10 ms,
// and reads every command the server executed through MONITOR. It checks
// that no renewal naming a (key, value) reaches Redis after the release of
// that lock returned (I3), that no renewal extends a lock after its release
// script ran, that the renew script runs nothing but TIME, and MGET,
// EXISTS and PEXPIRE or PEXPIREAT of its own keys, that nothing is reported lost and that no lock key is left. Sweeps must really
// race the releases: some renewals must extend locks that were released
// later.
func TestReleaseRacingSweep(t *testing.T) {
	// The watchdog parses "@every" itself and ticks every 10 ms; the test
	// also calls Sweep every 10 ms, so that sweeps start at other moments
	// than ticks.
	t.Logf("schedule %q; Sweep is called every %v as well", rrSchedule, rrEvery)

	srv := testredis.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spy := harness.Client(t, srv.Addr) // never watched
	mon := startMonitor(t, srv.Addr)
	// Where does this server log a script's own commands: before or after
	// the script call? Find out with a marker.
	calib := "calibrate-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := spy.Eval(ctx, "return redis.call('ECHO', ARGV[1])", nil, calib).Err(); err != nil {
		t.Fatalf("calibration EVAL: %v", err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4 * rrWorkers})
	defer rdb.Close()
	reg := registry.New(bsmredislock.New(), goredsync.New())
	if err := reg.Watch(rdb); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var (
		lostMu sync.Mutex // guards lost
		lost   []lostLock
	)
	wd, err := watchdog.Attach(reg, watchdog.WithSchedule(rrSchedule), watchdog.WithOnLost(func(l registry.Lock, err error) {
		lostMu.Lock()
		defer lostMu.Unlock()
		lost = append(lost, lostLock{lockID{l.Key, l.Value}, err})
	}))
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer wd.Stop()

	// The sweeper: a sweep every 10 ms.
	var sweepCalls, sweepErrs atomic.Int64
	stopSweeps := make(chan struct{})
	sweeperDone := make(chan struct{})
	go func() {
		defer close(sweeperDone)
		tk := time.NewTicker(rrEvery)
		defer tk.Stop()
		for {
			select {
			case <-stopSweeps:
				return
			case <-tk.C:
			}
			sweepCalls.Add(1)
			if err := wd.Sweep(ctx); err != nil {
				sweepErrs.Add(1)
			}
		}
	}()

	started := time.Now()
	var multiCycles atomic.Int64
	rs := redsync.New(goredis.NewPool(rdb))
	held := make([][]lockID, rrWorkers) // every key of every lock, with its value
	done := make([]int, rrWorkers)      // cycles completed
	errs := make([][]string, rrWorkers)
	var wg sync.WaitGroup
	for g := 0; g < rrWorkers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < rrCycles; i += rrWorkers {
				key := fmt.Sprintf("rr:%d:%d", g, i%4)
				// Half the cycles redsync, a quarter redislock Obtain, a
				// quarter ObtainMulti when the linked redislock has it.
				kind := rrRedislock
				switch {
				case i%2 == 1:
					kind = rrRedsync
				case (i/rrWorkers)%2 == 1:
					kind = rrMulti
				}
				keys, value, release, err := rrObtain(ctx, rdb, rs, kind, key)
				if err != nil {
					errs[g] = append(errs[g], fmt.Sprintf("cycle %d: obtain %s: %v", i, key, err))
					continue
				}
				if len(keys) > 1 {
					multiCycles.Add(1)
				}
				if hold := rand.N(rrMaxHold + 1); hold > 0 {
					time.Sleep(hold)
				}
				if err := release(ctx); err != nil {
					errs[g] = append(errs[g], fmt.Sprintf("cycle %d: release %q: %v", i, keys, err))
				}
				// One marker per key, all sent after the release returned.
				if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, k := range keys {
						p.Echo(ctx, releasedMarker+" "+k+" "+value)
					}
					return nil
				}); err != nil {
					errs[g] = append(errs[g], fmt.Sprintf("cycle %d: ECHO: %v", i, err))
				}
				for _, k := range keys {
					held[g] = append(held[g], lockID{k, value})
				}
				done[g]++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(started)
	close(stopSweeps)
	<-sweeperDone
	wd.Stop()
	st := wd.Stats()
	raw, err := mon.stop(ctx, spy)
	if err != nil {
		t.Fatalf("MONITOR: %v", err)
	}
	for _, es := range errs {
		for _, e := range es {
			t.Errorf("%s", e)
		}
	}

	lines := make([]monLine, 0, len(raw))
	for _, s := range raw {
		l, err := parseMonitorLine(s)
		if err != nil {
			t.Fatalf("%v", err)
		}
		lines = append(lines, l)
	}
	luaFirst, err := calibrate(lines, calib)
	if err != nil {
		t.Fatalf("%v", err)
	}
	cmds, ran := groupScripts(lines, luaFirst)
	an := analyseRenewals(cmds, ran)

	cycles := 0
	for _, n := range done {
		cycles += n
	}
	for _, h := range held {
		for _, id := range h {
			if _, ok := an.released[id]; !ok {
				t.Errorf("no release script call for %s %s in the MONITOR stream (release SHA1s not %s, %s or %s?)", id.key, id.value, redislockV094ReleaseSHA1, redislockV010ReleaseSHA1, redsyncDeleteSHA1)
			}
			if _, ok := an.returned[id]; !ok {
				t.Errorf("no %q marker for %s %s in the MONITOR stream", releasedMarker, id.key, id.value)
			}
		}
	}
	var keys []string
	if keys, err = spy.Keys(ctx, "*").Result(); err != nil {
		t.Fatalf("KEYS *: %v", err)
	}
	lostMu.Lock()
	defer lostMu.Unlock()

	t.Logf("%d cycles (%d with ObtainMulti over three keys) in %v; %d Sweep calls (%d returned an error), %d sweeps in Stats; MONITOR: %d commands, %d renew script calls naming %d (key, value) pairs, %d renewals (PEXPIRE) of %d distinct pairs, %d of which were released later",
		cycles, multiCycles.Load(), elapsed.Round(time.Millisecond), sweepCalls.Load(), sweepErrs.Load(), st.Sweeps, len(lines), an.renewCalls, an.named, an.extended, len(an.renewedLocks), an.renewedThenReleased())
	t.Logf("renewals naming a lock after its release script ran but before its release returned (allowed: the script found the key gone): %d; after the release returned: %d; extending a lock after its release script ran: %d",
		an.inWindow, len(an.afterReturn), len(an.extendedAfterRelease))
	t.Logf("Stats: renewals %d, lost %d, failed renew calls %d; OnLost %d; keys left %d", st.Renewals, st.Lost, st.Failures, len(lost), len(keys))

	if _, ok := any(redislock.New(rdb)).(rrMultiObtainer); ok && multiCycles.Load() == 0 {
		t.Errorf("cycles with ObtainMulti: got 0, want a quarter of them (the linked redislock has ObtainMulti)")
	}
	if cycles != rrCycles {
		t.Errorf("cycles completed: got %d, want %d", cycles, rrCycles)
	}
	for i, v := range an.afterReturn {
		if i == 10 {
			t.Errorf("... %d renewals after release in all", len(an.afterReturn))
			break
		}
		t.Errorf("renewal after the release returned: %s", v)
	}
	for _, v := range an.extendedAfterRelease {
		t.Errorf("renewal extended a lock after its release script ran: %s", v)
	}
	for _, v := range an.badScriptCmds {
		t.Errorf("the renew script ran %s, want only TIME, and MGET, EXISTS and PEXPIRE or PEXPIREAT of its keys", v)
	}
	// Every lock was held until its holder released it, so every OnLost is
	// a false report, including those whose renewal ran between the
	// release script and the release's return (the hook marks a release
	// before sending it, so the watchdog leaves such a lock to it).
	inWindow := 0
	for _, l := range lost {
		if an.renewedInWindow(l.id) {
			inWindow++
		}
		t.Errorf("OnLost(%s %s, %v), want no report: the holder released it (%s)", l.id.key, l.id.value, l.err, an.story(l.id))
	}
	t.Logf("OnLost reports: %d (%d of them for locks whose renewal raced their release)", len(lost), inWindow)
	if len(keys) != 0 {
		t.Errorf("keys left after every lock was released: got %q, want none", keys)
	}
	if an.extended == 0 || st.Renewals == 0 || an.renewedThenReleased() == 0 {
		t.Errorf("renewals: got %d in MONITOR (of %d locks released later), %d in Stats, want > 0: the sweeps did not race the releases", an.extended, an.renewedThenReleased(), st.Renewals)
	}
}

// calibrate finds the calibration EVAL and the ECHO its script ran, and
// reports whether the script's command was logged first.
func calibrate(lines []monLine, tag string) (luaFirst bool, err error) {
	eval, echo := -1, -1
	for i, l := range lines {
		switch {
		case !l.lua && l.name() == "eval" && len(l.args) == 4 && l.args[3] == tag:
			eval = i
		case l.lua && l.name() == "echo" && len(l.args) == 2 && l.args[1] == tag:
			echo = i
		}
	}
	if eval < 0 || echo < 0 {
		return false, fmt.Errorf("calibration: EVAL at %d, its ECHO at %d in the MONITOR stream; want both", eval, echo)
	}
	return echo < eval, nil
}

// renewalAnalysis is what the MONITOR stream shows about renewals and releases.
type renewalAnalysis struct {
	released map[lockID]int // first release script run per lock (stream index)
	returned map[lockID]int // the "released" marker per lock

	renewCalls   int            // renew script calls
	named        int            // (key, value) pairs they named
	extended     int            // PEXPIRE(AT)s the renew script ran
	renewedLocks map[lockID]int // PEXPIRE(AT)s per lock

	inWindow             int              // named after the release script, before the marker
	renewedAt            map[lockID][]int // stream indexes of the renew calls naming each lock
	afterReturn          []string         // named after the marker
	extendedAfterRelease []string         // PEXPIRE after the release script
	badScriptCmds        []string         // commands of the renew script other than TIME, and MGET, EXISTS, PEXPIRE(AT) of its keys
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// scriptOf returns the SHA1, KEYS and ARGV of an EVAL or EVALSHA.
func scriptOf(l monLine) (sha string, keys, argv []string, ok bool) {
	if len(l.args) < 3 {
		return "", nil, nil, false
	}
	switch l.name() {
	case "evalsha":
		sha = strings.ToLower(l.args[1])
	case "eval":
		sha = sha1Hex(l.args[1])
	default:
		return "", nil, nil, false
	}
	n, err := strconv.Atoi(l.args[2])
	if err != nil || n < 0 || 3+n > len(l.args) {
		return "", nil, nil, false
	}
	return sha, l.args[3 : 3+n], l.args[3+n:], true
}

func analyseRenewals(cmds []monLine, ran [][]monLine) renewalAnalysis {
	an := renewalAnalysis{released: map[lockID]int{}, returned: map[lockID]int{}, renewedLocks: map[lockID]int{}, renewedAt: map[lockID][]int{}}
	for i, c := range cmds {
		if c.name() == "echo" && len(c.args) == 2 {
			if f := strings.Fields(c.args[1]); len(f) == 3 && f[0] == releasedMarker {
				an.returned[lockID{f[1], f[2]}] = i
			}
			continue
		}
		sha, keys, argv, ok := scriptOf(c)
		if !ok {
			continue
		}
		switch {
		case isRedislockRelease(sha) || sha == redsyncDeleteSHA1:
			// A script call that ran nothing was refused (NOSCRIPT: the
			// client sends EVAL with the source next); the release scripts
			// always read their keys first (GET, MGET).
			if len(keys) >= 1 && len(argv) >= 1 && len(ran[i]) > 0 {
				for _, k := range keys {
					id := lockID{k, argv[0]}
					if _, seen := an.released[id]; !seen {
						an.released[id] = i
					}
				}
			}
		case sha == lwscripts.RenewSHA1:
			an.renewCalls++
			inCall := make(map[string]bool, len(keys))
			for _, k := range keys {
				inCall[k] = true
			}
			pexpired := make(map[string]bool)
			for _, r := range ran[i] {
				switch {
				case r.name() == "mget" && len(r.args) >= 2 && allIn(r.args[1:], inCall):
				case r.name() == "time" && len(r.args) == 1: // the server's clock, for PEXPIREAT
				case (r.name() == "exists" || r.name() == "pexpire" || r.name() == "pexpireat") && len(r.args) >= 2 && inCall[r.args[1]]:
					if r.name() != "exists" {
						pexpired[r.args[1]] = true
					}
				default:
					an.badScriptCmds = append(an.badScriptCmds, strings.Join(r.args, " "))
				}
			}
			named, err := renewedKeys(keys, argv)
			if err != nil {
				an.badScriptCmds = append(an.badScriptCmds, fmt.Sprintf("a renew call whose arguments do not parse (%v): %s", err, strings.Join(c.args, " ")))
				continue
			}
			for _, id := range named {
				an.named++
				an.renewedAt[id] = append(an.renewedAt[id], i)
				if m, ok := an.returned[id]; ok {
					an.afterReturn = append(an.afterReturn, fmt.Sprintf("%s %s: renew call %d of the stream, release returned at %d", id.key, id.value, i, m))
				} else if _, ok := an.released[id]; ok {
					an.inWindow++
				}
				if pexpired[id.key] {
					an.extended++
					an.renewedLocks[id]++
					if r, ok := an.released[id]; ok {
						an.extendedAfterRelease = append(an.extendedAfterRelease, fmt.Sprintf("%s %s: renew call %d of the stream, release script at %d", id.key, id.value, i, r))
					}
				}
			}
		}
	}
	return an
}

// renewedKeys returns the (key, value) pairs a call of the renew script
// names, read from its KEYS and ARGV as scripts.Renew lays them out: ARGV[1]
// is the mode; "s": the keys' values, then one TTL for all; "p": the keys'
// values, then one TTL each; "m": per lock its number of keys (consecutive
// in KEYS), its value and its TTL.
func renewedKeys(keys, argv []string) ([]lockID, error) {
	if len(argv) == 0 {
		return nil, errors.New("no mode")
	}
	n := len(keys)
	var out []lockID
	switch mode, rest := argv[0], argv[1:]; mode {
	case scripts.ModeShared, scripts.ModePerLock:
		want := n + 1
		if mode == scripts.ModePerLock {
			want = 2 * n
		}
		if len(rest) != want {
			return nil, fmt.Errorf("mode %q with %d keys: %d arguments after the mode, want %d", mode, n, len(rest), want)
		}
		for j, k := range keys {
			out = append(out, lockID{k, rest[j]})
		}
	case scripts.ModeMulti:
		if len(rest)%3 != 0 {
			return nil, fmt.Errorf("mode %q: %d arguments after the mode, want three per lock", mode, len(rest))
		}
		next := 0
		for a := 0; a < len(rest); a += 3 {
			count, err := strconv.Atoi(rest[a])
			if err != nil || count < 1 || next+count > n {
				return nil, fmt.Errorf("mode %q: lock %d has %q keys, %d keys left", mode, a/3, rest[a], n-next)
			}
			for _, k := range keys[next : next+count] {
				out = append(out, lockID{k, rest[a+1]})
			}
			next += count
		}
		if next != n {
			return nil, fmt.Errorf("mode %q: the locks have %d keys, the call %d", mode, next, n)
		}
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	return out, nil
}

// story tells where the renew calls naming id stand against its release
// script call and its release's return, as positions in the stream.
func (an renewalAnalysis) story(id lockID) string {
	rel, ok := an.released[id]
	if !ok {
		rel = -1
	}
	ret, ok := an.returned[id]
	if !ok {
		ret = -1
	}
	return fmt.Sprintf("renew calls at %v, release script at %d, release returned at %d, PEXPIREs %d", an.renewedAt[id], rel, ret, an.renewedLocks[id])
}

// renewedInWindow reports whether a renew call named id after its release
// script ran and before its release returned.
func (an renewalAnalysis) renewedInWindow(id lockID) bool {
	rel, okRel := an.released[id]
	ret, okRet := an.returned[id]
	if !okRel || !okRet {
		return false
	}
	for _, i := range an.renewedAt[id] {
		if rel < i && i < ret {
			return true
		}
	}
	return false
}

// renewedThenReleased counts the locks a renewal extended that were
// released afterwards: the sweeps caught them between obtain and release.
func (an renewalAnalysis) renewedThenReleased() int {
	n := 0
	for id := range an.renewedLocks {
		if _, ok := an.released[id]; ok {
			n++
		}
	}
	return n
}

// allIn reports whether every key is in set.
func allIn(keys []string, set map[string]bool) bool {
	for _, k := range keys {
		if !set[k] {
			return false
		}
	}
	return true
}
