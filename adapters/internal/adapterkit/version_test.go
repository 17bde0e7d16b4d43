package adapterkit

import (
	"runtime/debug"
	"testing"
)

func TestModuleVersion(t *testing.T) {
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	const (
		redislock = "github.com/bsm/redislock"
		redsync   = "github.com/go-redsync/redsync/v4"
	)
	tests := []struct {
		name string
		path string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		// as the redislock adapter asks
		{"no build info", redislock, nil, false, "(unknown)"},
		{"not a dependency", redislock, &debug.BuildInfo{Deps: []*debug.Module{dep("example.com/x", "v1.0.0", nil)}}, true, "(unknown)"},
		{"dependency", redislock, &debug.BuildInfo{Deps: []*debug.Module{dep("example.com/x", "v1.0.0", nil), dep(redislock, "v0.9.4", nil)}}, true, "v0.9.4"},
		{"replaced", redislock, &debug.BuildInfo{Deps: []*debug.Module{dep(redislock, "v0.9.4", dep("example.com/fork", "v0.9.5", nil))}}, true, "v0.9.4 replaced by example.com/fork v0.9.5"},
		{"replaced by a directory", redislock, &debug.BuildInfo{Deps: []*debug.Module{dep(redislock, "v0.9.4", dep("../fork", "", nil))}}, true, "v0.9.4 replaced by ../fork"},
		{"main module", redislock, &debug.BuildInfo{Main: debug.Module{Path: redislock, Version: "(devel)"}}, true, "(devel)"},
		// as the redsync adapter asks
		{"no build info", redsync, nil, false, "(unknown)"},
		{"not a dependency", redsync, &debug.BuildInfo{Deps: []*debug.Module{dep("example.com/x", "v1.0.0", nil)}}, true, "(unknown)"},
		{"dependency", redsync, &debug.BuildInfo{Deps: []*debug.Module{dep("example.com/x", "v1.0.0", nil), dep(redsync, "v4.17.0", nil)}}, true, "v4.17.0"},
		{"replaced", redsync, &debug.BuildInfo{Deps: []*debug.Module{dep(redsync, "v4.17.0", dep("example.com/fork/v4", "v4.17.1", nil))}}, true, "v4.17.0 replaced by example.com/fork/v4 v4.17.1"},
		{"replaced by a directory", redsync, &debug.BuildInfo{Deps: []*debug.Module{dep(redsync, "v4.17.0", dep("../fork", "(devel)", nil))}}, true, "v4.17.0 replaced by ../fork"},
		// neither
		{"nil dependency", redsync, &debug.BuildInfo{Deps: []*debug.Module{nil, dep(redsync, "v4.17.0", nil)}}, true, "v4.17.0"},
		{"no version", redsync, &debug.BuildInfo{Deps: []*debug.Module{dep(redsync, "", nil)}}, true, "(unknown)"},
	}
	for _, tt := range tests {
		if got := moduleVersion(tt.bi, tt.ok, tt.path); got != tt.want {
			t.Errorf("moduleVersion(%s, %s) = %q, want %q", tt.name, tt.path, got, tt.want)
		}
	}
}

func TestVersion(t *testing.T) {
	if got := Version("github.com/bsm/redislock"); got == "" {
		t.Errorf("Version(redislock) = %q, want a version or (unknown)", got)
	}
	if got := Version("example.com/not/linked"); got != "(unknown)" {
		t.Errorf("Version(a module not linked) = %q, want (unknown)", got)
	}
}
