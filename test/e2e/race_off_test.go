//go:build !race

package e2e

// raceEnabled is true when the tests run under -race; gantry is then built with -race
// too, so end-to-end runs also catch the server's data races.
const raceEnabled = false
