# SPDX-License-Identifier: GPL-2.0
# The RDMA device each guest makes on its NIC (sourced by
# scripts/guest/init.sh and selftests/lib.sh): soft-RoCE (rxe0, the
# default) or, with scripts/testbed.sh --link siw, soft-iWARP (siw0).
RDMA_LINK=${RDMARS_LINK:-rxe}
case "$RDMA_LINK" in
  siw) RDMA_DEV=siw0 RDMA_DRIVER=siw ;;
  *) RDMA_LINK=rxe RDMA_DEV=rxe0 RDMA_DRIVER=rdma_rxe ;;
esac

# rdma_link_add: the device made on eth0 (its driver loaded first).
rdma_link_add() {
  modprobe "$RDMA_DRIVER" && rdma link add "$RDMA_DEV" type "$RDMA_LINK" netdev eth0
}
