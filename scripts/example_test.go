package scripts_test

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lockwatch/lockwatch/scripts"
)

// An allow-list for an ACL or a proxy that admits only known scripts: the
// renew script and every pinned script.
func ExampleSHA1s() {
	for _, sha := range scripts.SHA1s() {
		fmt.Println(sha)
	}
	// Output:
	// 5a22d7e8431313862816d4416b5e46dd70fc340d
	// 6484da7d58920897fdc22b7f9afd1a3d47524ea8
	// 66e1084c2d842a7e8c271925aae90219fac4e129
	// 80a1b5f2cfccec3b7119ba7721d2127682b691a7
	// 9470c810040e272ee6c579d8d4331aaf6332a7b1
	// a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf
	// b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79
	// cf0e94b2e9ffc7e04395cf88f7583fc309985910
	// d75bb8b5bd13532ddedd17762e772346e39b321e
	// e950836ed1e694540c503ef9972b8de518044d3b
	// ea170dc573a4cfd37914800f86224c00be729256
	// eb0c00d98f6f33b4262419a509002884540f30be
}

// An allow-list for the releases in use only: the renew script and the
// scripts redislock v0.10.0 sends.
func ExamplePinsOf() {
	allow := []string{scripts.RenewSHA1}
	for _, p := range scripts.PinsOf(scripts.Redislock) {
		if slices.Contains(p.Releases, "v0.10.0") {
			allow = append(allow, p.SHA1)
		}
	}
	fmt.Println(strings.Join(allow, "\n"))
	// Output:
	// ea170dc573a4cfd37914800f86224c00be729256
	// eb0c00d98f6f33b4262419a509002884540f30be
	// 5a22d7e8431313862816d4416b5e46dd70fc340d
	// 9470c810040e272ee6c579d8d4331aaf6332a7b1
	// 66e1084c2d842a7e8c271925aae90219fac4e129
}

// The releases whose scripts the version guard pins.
func ExampleReleases() {
	fmt.Println(scripts.Releases(scripts.Redislock))
	fmt.Println(scripts.Releases(scripts.Redsync))
	// Output:
	// [v0.9.4 v0.10.0]
	// [v4.12.1 v4.13.0 v4.15.0 v4.16.0 v4.17.0 v4.18.0 v4.18.1]
}
