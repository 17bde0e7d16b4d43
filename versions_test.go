package lockwatch_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/internal/testkit/versions"
)

// Every upstream release whose scripts an adapter pins must be exercised by
// a test: it must be the minimum go.mod requires (the whole suite runs on
// it) or the newest release CI names in .ci/newest.txt (CI runs the
// compatibility, transparency and adapter tests and the upstream suites on
// it). A pin added for a release neither names fails here.
func TestPinnedReleasesAreExercised(t *testing.T) {
	dir, _ := os.Getwd()
	root, err := versions.Root(dir)
	if err != nil {
		t.Fatal(err)
	}
	mins, err := versions.Minimums(root)
	if err != nil {
		t.Fatal(err)
	}
	newest, err := versions.Newest(root)
	if err != nil {
		t.Fatal(err)
	}
	if upgraded(mins, newest) {
		// .ci/run's newest pass: a copy of the tree whose go.mod requires
		// the newest releases. What is exercised is decided by the
		// repository's own go.mod, checked on it.
		t.Skip("go.mod requires the releases .ci/newest.txt names (the newest pass runs in an upgraded copy); checked on the repository's go.mod")
	}
	for _, a := range []struct {
		module   string
		releases []string
	}{
		{"github.com/bsm/redislock", bsmredislock.Releases()},
		{"github.com/go-redsync/redsync/v4", goredsync.Releases()},
	} {
		tested := []string{mins[a.module], newest[a.module]}
		for _, r := range a.releases {
			if !slices.Contains(tested, r) {
				t.Errorf("%s %s is pinned by its adapter but exercised by no test: go.mod requires %s and .ci/newest.txt names %s; add it to one of them",
					a.module, r, mins[a.module], newest[a.module])
			}
		}
	}
	// Every upstream module in go.mod has a newest release named, not older
	// than its minimum.
	for mod, min := range mins {
		if strings.HasPrefix(mod, "github.com/lockwatch/") || !direct(root, mod) {
			continue
		}
		n, ok := newest[mod]
		switch {
		case !ok:
			t.Errorf("go.mod requires %s %s, but .ci/newest.txt names no newest release of it", mod, min)
		case versions.Compare(n, min) < 0:
			t.Errorf(".ci/newest.txt names %s %s, older than go.mod's minimum %s", mod, n, min)
		}
	}
}

// upgraded reports whether go.mod requires at least the newest release of
// every module .ci/newest.txt names.
func upgraded(mins, newest map[string]string) bool {
	for mod, n := range newest {
		if m, ok := mins[mod]; !ok || versions.Compare(m, n) < 0 {
			return false
		}
	}
	return true
}

// direct reports whether go.mod requires mod directly.
func direct(root, mod string) bool {
	b, err := os.ReadFile(root + "/go.mod")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == mod {
			return !strings.Contains(line, "// indirect")
		}
	}
	return false
}
