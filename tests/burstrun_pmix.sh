#!/bin/sh
# tests/burstrun_pmix.sh BURSTRUN  (suite 'net')
#
# burstrun's ranks under Open MPI's mpirun with --launcher pmix (tools/launch_pmix.c): rank, size
# and the exchange of fabric addresses come from mpirun's PMIx server. Checks that
#   - --hosts localhost:2 --launcher pmix --check passes and the report names PMIx; --launcher mpi
#     and the default (auto) name MPI; the three give bitwise the same results (--hash);
#   - a rank whose PMIx environment is present (PMIX_RANK, PMIX_NAMESPACE) but whose launcher's
#     server cannot be reached (no server address, or one nothing listens on: PMIx_Init fails)
#     exits 3 at once with an error naming PMIx and the rank;
#   - --launcher without --hosts / --hostfile, and an unknown value, are usage errors naming it.
# Exit 77 (SKIP) when mpirun or burstrun's MPI or PMIx support is absent.
set -u
BR=$1
. "$(dirname "$0")/burstrun_lib.sh"
test_init burstrun_pmix
SMALL="--seq 256 --heads 2 --kv-heads 1 --head-dim 32 --warmup 0 --iters 1 --seed $SEED"

# usage errors need neither mpirun nor PMIx
"$BR" --launcher pmix $SMALL >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--launcher pmix needs --hosts" "$TMP/err" ||
    { cat "$TMP/err"; fail "--launcher without --hosts is not a usage error naming it"; }
"$BR" --hosts localhost:2 --launcher carrierpigeon $SMALL >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q -- "--launcher: 'carrierpigeon'" "$TMP/err" ||
    { cat "$TMP/err"; fail "--launcher carrierpigeon is not a usage error naming it"; }

features=$("$BR" -V 2>/dev/null | sed -n 's/^burstrun features: //p')
case "$features" in
mpi*pmix*) ;;
*)
    echo "SKIP: burstrun built without MPI or PMIx (burstrun features: $features)"
    [ $FAILS -eq 0 ] && exit 77
    exit 1
    ;;
esac

# PMIx environment present, its server unreachable: PMIx_Init fails; a clear error, no hang
t0=$(date +%s)
PMIX_RANK=3 PMIX_NAMESPACE=burst-test-nosuchjob timeout 60 "$BR" --mpi-rank-worker \
    --launcher pmix -n 4 $SMALL >/dev/null 2>"$TMP/err"
rc=$?
echo "PMIx_Init without a server: exit $rc after $(($(date +%s) - t0)) s: $(cat "$TMP/err")"
[ $rc -eq 3 ] || fail "PMIx_Init failure: exit $rc, expected 3"
grep -q "rank 3: PMIx_Init failed" "$TMP/err" || fail "PMIx_Init failure: the error does not name PMIx and rank 3"
# ...and with the server's address set to a port nothing listens on (loopback port 1)
uri='burst-test-dead.0;tcp4://127.0.0.1:1'
PMIX_RANK=1 PMIX_NAMESPACE=burst-test-dead PMIX_SERVER_URI41="$uri" PMIX_SERVER_URI4="$uri" \
    PMIX_SERVER_URI3="$uri" PMIX_SERVER_URI2="$uri" timeout 60 "$BR" --mpi-rank-worker \
    --launcher pmix -n 2 $SMALL >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 3 ] && grep -q "rank 1: PMIx_Init failed" "$TMP/err" ||
    { cat "$TMP/err"; fail "PMIx server out of reach: exit $rc, expected 3 naming PMIx_Init and rank 1"; }

command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) not found"; [ $FAILS -eq 0 ] && exit 77; exit 1; }
# loopback-only MCA settings for a sandbox; root allowed (CI)
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo \
    OMPI_MCA_oob_tcp_if_include=lo OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

for l in pmix mpi auto; do
    flag="--launcher $l"
    [ $l = auto ] && flag=
    "$BR" --hosts localhost:2 $flag --check --causal $SMALL --fabric shm --deterministic --hash \
        >"$TMP/out.$l" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { cat "$TMP/out.$l"; fail "--launcher $l: --check exited $rc"; }
    grep -q "^result   PASS" "$TMP/out.$l" || fail "--launcher $l: the check did not pass"
    case $l in pmix) want="ranks joined through PMIx" ;; *) want="ranks joined through MPI (--launcher $l" ;; esac
    grep -qF "$want" "$TMP/out.$l" || { cat "$TMP/out.$l"; fail "--launcher $l: the report does not say '$want'"; }
    sed -n 's/^hash *//p' "$TMP/out.$l" | head -n 1 >"$TMP/hash.$l"
done
echo "hashes: pmix $(cat "$TMP/hash.pmix"), mpi $(cat "$TMP/hash.mpi"), auto $(cat "$TMP/hash.auto")"
[ -s "$TMP/hash.pmix" ] && cmp -s "$TMP/hash.pmix" "$TMP/hash.mpi" && cmp -s "$TMP/hash.mpi" "$TMP/hash.auto" ||
    fail "--launcher pmix, mpi and auto give different results"

[ $FAILS -eq 0 ] || { echo "$FAILS failure(s)"; exit 1; }
echo "PASS"
