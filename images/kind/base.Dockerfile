# kind v0.33.0's base image (images/base/Dockerfile in the kind module), rebuilt here without a registry: FROM a
# debootstrap bookworm rootfs holding kind's package list (images/kind/base-rootfs.sh, imported as dflash/kind-debian),
# kind's own files/ from its module, and the cluster tier's containerd v2 build in place of the one kind builds from git.
# Debian's runc 1.1.5 and CNI plugins (/usr/lib/cni) stand in for kind's git builds; crictl and fuse-overlayfs are left out.
FROM dflash/kind-debian:bookworm
COPY files/usr/local/bin/ /usr/local/bin/
COPY files/kind/ /kind/
COPY files/etc/ /etc/
COPY bin/ /usr/local/bin/
RUN chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/* \
    && mkdir -p /opt/cni/bin && ln -s /usr/lib/cni/* /opt/cni/bin/ \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
       /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
       /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && systemctl enable containerd.service undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
       | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json \
    && mkdir -p /etc/kubernetes/manifests
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
