#!/bin/sh
# ipmi_sim's chassis control program, keeping the chassis in files (molecule scenario).
# ipmi_sim runs it as: chassis.sh STATE_DIR MC get ITEM...   -> prints ITEM:VALUE lines
#                      chassis.sh STATE_DIR MC set ITEM VALUE...
#                      chassis.sh STATE_DIR MC check ...
# STATE_DIR/power: 1 (on) or 0 (off); STATE_DIR/boot: pxe, default, …;
# STATE_DIR/soft_shutdown: obey (an ACPI soft-off powers the machine off) or ignore;
# STATE_DIR/commands.log: one line "TIME ITEM VALUE" per order received.
state=$1
op=$3
shift 3
read_file() { cat "$state/$1" 2>/dev/null || printf '%s\n' "$2"; }
write_file() { printf '%s\n' "$2" > "$state/$1.tmp" && mv "$state/$1.tmp" "$state/$1"; }
case "$op" in
  get)
    for item in "$@"; do
      case "$item" in
        power) printf 'power:%s\n' "$(read_file power 0)" ;;
        boot) printf 'boot:%s\n' "$(read_file boot default)" ;;
      esac
    done
    ;;
  set)
    while [ $# -ge 2 ]; do
      item=$1
      value=$2
      shift 2
      printf '%s %s %s\n' "$(date +%s.%N)" "$item" "$value" >> "$state/commands.log"
      case "$item" in
        power) write_file power "$value" ;;
        boot) write_file boot "$value" ;;
        shutdown)
          if [ "$value" = 1 ] && [ "$(read_file soft_shutdown obey)" = obey ]; then
            write_file power 0
          fi
          ;;
      esac
    done
    ;;
esac
exit 0
