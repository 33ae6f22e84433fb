# Sourced by the bench scripts that alternate variants round by round.
#
# run_rounds ROUNDS RUN VARIANT...: for each round, calls `RUN ROUND NAME BINARY CONFIG` for every
# VARIANT (NAME=BINARY or NAME=BINARY:CONFIG; CONFIG is "" without one), in the order given in odd
# rounds and reversed in even ones, so that drifting machine load hits every variant alike.
run_rounds() {
  local rounds=$1 run=$2
  shift 2
  local variants=("$@") order r i v name rest bin cfg
  for r in $(seq "$rounds"); do
    order=("${variants[@]}")
    if [ $((r % 2)) = 0 ]; then
      order=()
      for ((i = ${#variants[@]} - 1; i >= 0; i--)); do order+=("${variants[i]}"); done
    fi
    for v in "${order[@]}"; do
      name=${v%%=*} rest=${v#*=}
      bin=${rest%%:*} cfg=""
      if [ "$rest" != "$bin" ]; then cfg=${rest#*:}; fi
      "$run" "$r" "$name" "$bin" "$cfg"
    done
  done
}
