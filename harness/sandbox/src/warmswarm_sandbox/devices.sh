#!/bin/sh
# The sandbox's EBS hardware, as the per-boot cache script (node_cache.sh) sees it: a volume is a host
# folder linked into the machine's device dir. This plays blkid -p, the zero check, mkfs (which empties the
# folder) and mount on such folders. A volume named in the faults dir (Sandbox.break_volume) cannot be read: a failing disk.
# Usage: devices.sh FAULTS_DIR probe|zeroed|mkfs|mount DEVICE [TARGET]
set -eu
faults="$1"
op="$2"
device="$3"
volume_id=$(basename "$device")
if [ -e "$faults/$volume_id" ]; then
  case "$op" in
    probe) exit 8 ;;   # blkid's "cannot read"
    zeroed) exit 2 ;;  # cmp's "trouble"
  esac
fi
case "$op" in
  probe) [ -e "$device/.warmswarm-formatted" ] && exit 0; exit 2 ;;
  zeroed) [ -z "$(ls -A "$device")" ] && exit 0; exit 1 ;;
  # A format destroys what the disk held, as mkfs does: a test can then tell a formatted volume by its lost files and
  # by the marker's new contents (each format writes a new one), not only by the marker's presence.
  mkfs)
    find -H "$device" -mindepth 1 -delete  # -H: the device is a link to the volume's folder
    echo "formatted $(date +%s.%N) $$" > "$device/.warmswarm-formatted"
    ;;
  mount) mount --bind "$device" "$4" ;;
  *) echo "devices.sh: unknown operation $op" >&2; exit 64 ;;
esac
