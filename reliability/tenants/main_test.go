package tenants_test

import (
	"testing"

	"github.com/lockwatch/lockwatch/internal/testkit/testredis"
)

func TestMain(m *testing.M) {
	testredis.VerifyTestMain(m)
}
