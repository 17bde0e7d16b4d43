package versions

import (
	"os"
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"v0.9.4", "v0.10.0", -1},
		{"v0.10.0", "v0.9.4", 1},
		{"v4.18.1", "v4.18.1", 0},
		{"v9.23.0", "v9.4.0", 1},
		{"v1.0.0-rc.1", "v1.0.0", 0},
	} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestReadTheRepository(t *testing.T) {
	dir, _ := os.Getwd()
	root, err := Root(dir)
	if err != nil {
		t.Fatal(err)
	}
	mins, err := Minimums(root)
	if err != nil || mins["github.com/redis/go-redis/v9"] == "" {
		t.Fatalf("Minimums = %v, %v; want go-redis among them", mins, err)
	}
	newest, err := Newest(root)
	if err != nil || newest["github.com/bsm/redislock"] == "" {
		t.Fatalf("Newest = %v, %v; want redislock among them", newest, err)
	}
}

// .ci/newest.txt names the newest Go toolchain CI tests beside the
// modules, and Newest does not take it for a module.
func TestToolchain(t *testing.T) {
	dir, _ := os.Getwd()
	root, err := Root(dir)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := Toolchain(root)
	if err != nil || !strings.HasPrefix(tc, "go1.") {
		t.Fatalf("Toolchain = %q, %v; want the newest Go named in .ci/newest.txt", tc, err)
	}
	newest, err := Newest(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := newest[ToolchainLine]; ok {
		t.Errorf("Newest lists %q as a module", ToolchainLine)
	}
}
