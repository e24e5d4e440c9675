#!/bin/bash
# The healthcheck of docker-compose.yml's kafka service, for the test image: asks the broker
# at --bootstrap-server HOST:PORT for its API versions (an ApiVersions v0 request over
# bash's /dev/tcp) and succeeds if it answers this request without an error.
set -euo pipefail

server=""
while (($#)); do
    case "$1" in
    --bootstrap-server) server="$2"; shift 2 ;;
    *) shift ;;
    esac
done
[[ "$server" == *:* ]] || { echo "usage: $0 --bootstrap-server HOST:PORT" >&2; exit 2; }
exec 3<>"/dev/tcp/${server%:*}/${server##*:}"
# size 10; api key 18 (ApiVersions), version 0; correlation id 7; null client id
printf '\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x07\xff\xff' >&3
reply="$(timeout 5 head -c 10 <&3 | od -An -tx1 | tr -d ' \n')"
# size (4 bytes), correlation id 7, error code 0
[[ "${reply:8:12}" == "000000070000" ]] || { echo "no ApiVersions answer: '$reply'" >&2; exit 1; }
echo "$server answers ApiVersions"
