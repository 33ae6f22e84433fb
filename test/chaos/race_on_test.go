//go:build race

package chaos

// raceEnabled is true when the test runs under -race; gantry is then built
// with -race too, so the loop also catches the nodes' data races.
const raceEnabled = true
