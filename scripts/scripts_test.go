package scripts_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockwatch/lockwatch/internal/testkit/versions"
	"github.com/lockwatch/lockwatch/scripts"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRenewSHA1MatchesSource(t *testing.T) {
	sum := sha1.Sum([]byte(scripts.RenewSource()))
	if got := hex.EncodeToString(sum[:]); got != scripts.RenewSHA1 {
		t.Fatalf("sha1(renew.lua) = %s, want pinned %s", got, scripts.RenewSHA1)
	}
	if got := redis.NewScript(scripts.RenewSource()).Hash(); got != scripts.RenewSHA1 {
		t.Fatalf("redis.NewScript(RenewSource()).Hash() = %s, want %s", got, scripts.RenewSHA1)
	}
}

func TestRenewScriptLoadOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	checkScriptLoad(t, rdb)
}

// checkScriptLoad pre-loads the renew script as an operator would and checks
// that the server knows it by RenewSHA1.
func checkScriptLoad(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sha, err := rdb.ScriptLoad(ctx, scripts.RenewSource()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if sha != scripts.RenewSHA1 {
		t.Fatalf("SCRIPT LOAD RenewSource() = %s, want RenewSHA1 %s", sha, scripts.RenewSHA1)
	}
	ok, err := rdb.ScriptExists(ctx, scripts.RenewSHA1).Result()
	if err != nil || len(ok) != 1 || !ok[0] {
		t.Fatalf("SCRIPT EXISTS RenewSHA1 after SCRIPT LOAD = %v, %v, want [true]", ok, err)
	}
	// Loaded, it runs by its SHA1: no keys, an empty reply.
	if _, err := rdb.EvalSha(ctx, scripts.RenewSHA1, nil, "s").Result(); err != nil && err != redis.Nil {
		t.Fatalf("EVALSHA RenewSHA1 with no keys = %v, want no error", err)
	}
}

// TestPins checks the table: what each pin is, and its order, which the
// adapters' fuzz seed corpora depend on (they name pins by index).
func TestPins(t *testing.T) {
	type row struct{ library, script, first, last string }
	want := []row{
		{scripts.Redislock, "obtain", "v0.9.4", "v0.9.4"},
		{scripts.Redislock, "refresh", "v0.9.4", "v0.9.4"},
		{scripts.Redislock, "release", "v0.9.4", "v0.9.4"},
		{scripts.Redislock, "pttl", "v0.9.4", "v0.9.4"},
		{scripts.Redislock, "obtain", "v0.10.0", "v0.10.0"},
		{scripts.Redislock, "refresh", "v0.10.0", "v0.10.0"},
		{scripts.Redislock, "release", "v0.10.0", "v0.10.0"},
		{scripts.Redislock, "pttl", "v0.10.0", "v0.10.0"},
		{scripts.Redsync, "delete", "v4.12.1", "v4.18.1"},
		{scripts.Redsync, "touch", "v4.12.1", "v4.18.1"},
		{scripts.Redsync, "touchWithSetNX", "v4.12.1", "v4.18.1"},
	}
	ps := scripts.Pins()
	var got []row
	seen := map[string]bool{scripts.RenewSHA1: true}
	for _, p := range ps {
		if len(p.Releases) == 0 {
			t.Errorf("pin %s %s %s names no release", p.Library, p.Script, p.SHA1)
			continue
		}
		got = append(got, row{p.Library, p.Script, p.Releases[0], p.Releases[len(p.Releases)-1]})
		if b, err := hex.DecodeString(p.SHA1); err != nil || len(b) != sha1.Size || hex.EncodeToString(b) != p.SHA1 || seen[p.SHA1] {
			t.Errorf("pin %s %s: SHA1 %q, want lower-case hex, pinned once and not the renew script's", p.Library, p.Script, p.SHA1)
		}
		seen[p.SHA1] = true
		if !slices.IsSortedFunc(p.Releases, versions.Compare) || len(slices.Compact(slices.Clone(p.Releases))) != len(p.Releases) {
			t.Errorf("pin %s %s: releases %v, want oldest first, each once", p.Library, p.Script, p.Releases)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Pins() =\n%v\nwant\n%v\n(a new pin goes after the others of its library: the adapters' fuzz corpora name pins by index)", got, want)
	}
	var each []scripts.Pin
	for _, lib := range []string{scripts.Redislock, scripts.Redsync} {
		each = append(each, scripts.PinsOf(lib)...)
	}
	if fmt.Sprint(each) != fmt.Sprint(ps) {
		t.Errorf("PinsOf(Redislock) and PinsOf(Redsync) = %v, want Pins() = %v", each, ps)
	}
	for _, lib := range []string{"", "github.com/bsm/redislock/v2", "redislock"} {
		if p := scripts.PinsOf(lib); p != nil {
			t.Errorf("PinsOf(%q) = %v, want nil", lib, p)
		}
		if r := scripts.Releases(lib); r != nil {
			t.Errorf("Releases(%q) = %v, want nil", lib, r)
		}
	}
}

func TestReleases(t *testing.T) {
	for lib, want := range map[string][]string{
		scripts.Redislock: {"v0.9.4", "v0.10.0"},
		scripts.Redsync:   {"v4.12.1", "v4.13.0", "v4.15.0", "v4.16.0", "v4.17.0", "v4.18.0", "v4.18.1"},
	} {
		got := scripts.Releases(lib)
		if !slices.Equal(got, want) {
			t.Errorf("Releases(%s) = %v, want %v", lib, got, want)
		}
		// Every release the pins name, and no other.
		var named []string
		for _, p := range scripts.PinsOf(lib) {
			named = append(named, p.Releases...)
		}
		slices.SortFunc(named, versions.Compare)
		if named = slices.Compact(named); !slices.Equal(named, got) {
			t.Errorf("the pins of %s name releases %v, want Releases() = %v", lib, named, got)
		}
	}
}

func TestSHA1s(t *testing.T) {
	got := scripts.SHA1s()
	want := []string{scripts.RenewSHA1}
	for _, p := range scripts.Pins() {
		want = append(want, p.SHA1)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("SHA1s() = %v, want RenewSHA1 and every pin's, sorted: %v", got, want)
	}
}

// TestCopies checks that what the functions return is the caller's: changing
// it changes nothing for the next caller.
func TestCopies(t *testing.T) {
	before := fmt.Sprint(scripts.Pins(), scripts.PinsOf(scripts.Redsync), scripts.Releases(scripts.Redsync), scripts.SHA1s())
	for _, ps := range [][]scripts.Pin{scripts.Pins(), scripts.PinsOf(scripts.Redislock), scripts.PinsOf(scripts.Redsync)} {
		for i := range ps {
			ps[i].SHA1 = "changed"
			ps[i].Releases[0] = "v9.9.9"
			ps[i].Releases = append(ps[i].Releases, "v9.9.10")
		}
	}
	for _, s := range [][]string{scripts.Releases(scripts.Redislock), scripts.Releases(scripts.Redsync), scripts.SHA1s()} {
		s[0] = "changed"
	}
	if after := fmt.Sprint(scripts.Pins(), scripts.PinsOf(scripts.Redsync), scripts.Releases(scripts.Redsync), scripts.SHA1s()); after != before {
		t.Errorf("after changing what they returned, Pins, PinsOf, Releases and SHA1s return\n%s\nwant\n%s", after, before)
	}
}

// TestConcurrent calls every function from several goroutines; -race checks
// that nothing is shared that is written.
func TestConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				ps := scripts.Pins()
				ps[0].Releases[0] = "x"
				r := scripts.Releases(scripts.Redsync)
				r[0] = "x"
				s := scripts.SHA1s()
				s[0] = "x"
				_ = scripts.PinsOf(scripts.Redislock)
				_ = scripts.RenewSource()
			}
		}()
	}
	wg.Wait()
}
