// The application .ci/consumer.sh builds, as a user of lockwatch would:
// it requires the three modules at a release and replaces none. It builds
// only against the module proxy consumer.sh writes from the checkout.
module example.com/lockwatchconsumer

go 1.25

require (
	github.com/lockwatch/lockwatch v0.1.0
	github.com/lockwatch/lockwatch/extra/lockwatchotel v0.1.0
	github.com/lockwatch/lockwatch/extra/lockwatchprom v0.1.0
)
