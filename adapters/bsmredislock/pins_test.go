package bsmredislock

import "fmt"

// The SHA1s of redislock's scripts, as package scripts pins them.
var (
	v094ObtainSHA1  = pinned(kindObtain, v094)
	v094RefreshSHA1 = pinned(kindRefresh, v094)
	v094ReleaseSHA1 = pinned(kindRelease, v094)
	v094PTTLSHA1    = pinned(kindPTTL, v094)

	v010ObtainSHA1  = pinned(kindObtain, v010)
	v010RefreshSHA1 = pinned(kindRefresh, v010)
	v010ReleaseSHA1 = pinned(kindRelease, v010)
	v010PTTLSHA1    = pinned(kindPTTL, v010)
)

// pinned returns the SHA1 of the script of kind k that release r sends.
func pinned(k kind, r release) string {
	for _, p := range pins {
		if p.Script == (script{k, r}) {
			return p.SHA1
		}
	}
	panic(fmt.Sprintf("no %v script of %v is pinned", k, r))
}
