package registry

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUpstreamChanged is wrapped by the error [Adapter.Probe] (and so
// watchdog.Attach) returns when the linked upstream library sends scripts
// whose SHA1 lockwatch has not pinned: such a library may obtain, refresh or
// release locks in ways the registry would not see.
var ErrUpstreamChanged = errors.New("registry: upstream lock library sends unknown scripts")

// ErrNilClient is returned by [Registry.Watch] for a nil client.
var ErrNilClient = errors.New("registry: nil client")

// Script names one Lua script an upstream library sent.
type Script struct {
	// Use says what the library used it for, e.g. "obtain" or "release".
	Use string
	// SHA1 is the script's hash, as sent by EVALSHA or computed from EVAL's source.
	SHA1 string
}

// UpstreamChangedError reports the scripts a probe saw that are not pinned.
// It wraps [ErrUpstreamChanged].
type UpstreamChangedError struct {
	// Library is the upstream module path, e.g. "github.com/bsm/redislock".
	Library string
	// Version is the linked version as the build info records it, or
	// "(unknown)" when the binary carries no build info.
	Version string
	// Scripts are the unpinned scripts, in the order they were sent.
	Scripts []Script
}

func (e *UpstreamChangedError) Error() string {
	parts := make([]string, len(e.Scripts))
	for i, s := range e.Scripts {
		parts[i] = fmt.Sprintf("%s script %s", s.Use, s.SHA1)
	}
	return fmt.Sprintf("registry: %s %s sends scripts lockwatch does not know (%s); upgrade lockwatch or pin a supported version",
		e.Library, e.Version, strings.Join(parts, ", "))
}

// Unwrap returns [ErrUpstreamChanged].
func (e *UpstreamChangedError) Unwrap() error { return ErrUpstreamChanged }
