# Sourced by the scripts that run FlashMLA's harness beside the checkout (harness.sh here,
# bench/plans/s69's) and by bench/plans/s70/variants.sh (its base tree): peer_src installs the
# carried .debs and copies the working tree to /tmp/src-r (no builds, .git, .peer or .debs: the
# tree the harness builds); peer_build builds FlashMLA's harness and the library from it into
# /tmp/peer (.peer/flashmla/run.sh's build phase; C labels the commit, $1 the build jobs, 16 by
# default).
peer_src() {
  bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
  rm -rf /tmp/src-r && mkdir /tmp/src-r
  tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . \
    | tar -x -C /tmp/src-r
}
peer_build() {
  rm -rf /tmp/peer && mkdir -p /tmp/peer
  COMMIT=${C:-main} FLASHMLA_PREBUILT_SPLITKV=1 PHASE=build OUT=/tmp/peer MAX_JOBS=${1:-16} \
    bash .peer/flashmla/run.sh /tmp/src-r > /tmp/peer/build.log 2>&1; echo "peer build rc=$?"
}
