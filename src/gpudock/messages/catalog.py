"""What services say — status reasons, events, ledger lines, estimates, image
verdicts, errors — in Simplified Chinese, keyed by the English template.

The key is the English text with `{named}` fields, as the code writes it with
`Message(...)`; a key without fields is a whole sentence looked up as it is.
The console's chrome (labels, headings, buttons) is in `gpudock.web.i18n`.
"""

from __future__ import annotations

ZH_CN_MESSAGES: dict[str, str] = {
    "; ": "；",
    # durations and amounts
    "{n} s": "{n} 秒",
    "{n} min": "{n} 分钟",
    "{h} h {m} min": "{h} 小时 {m} 分钟",
    "{d} d {h} h": "{d} 天 {h} 小时",
    "{amount} {currency}/h": "{amount} {currency}/小时",
    # instance status reasons and events
    "waiting for placement": "等待调度",
    "waiting for {what}": "等待 {what}",
    "{count} × {models}": "{count} × {models}",
    "{count} × {models} on its own host (started with --stay)": (
        "{count} × {models}，限原主机（以 --stay 开机）"
    ),
    "a {share} share of one {models}": "一张 {models} 的 {share} 份额",
    "{cpu} CPU and {memory} GB of memory": "{cpu} 核 CPU 和 {memory} GB 内存",
    "moving: waiting for a healthy {what}; no capacity free now": (
        "迁移中：等待健康的 {what}；当前没有空闲容量"
    ),
    "{reason}; waiting longer than {limit} s, so it holds host {host}: nothing that came later "
    "is placed there until it runs": (
        "{reason}；等待已超过 {limit} 秒，因此预留主机 "
        "{host}：在它运行前，后来的请求不会被放到该主机"
    ),
    "placed; starting the container": "已调度；正在启动容器",
    "placed on healthy GPUs; moving": "已调度到健康的 GPU；正在迁移",
    "running on {host} ({gpus})": "运行于 {host}（{gpus}）",
    "no GPU": "无 GPU",
    "stop requested": "已请求关机",
    "start requested": "已请求开机",
    "restart requested": "已请求重启",
    "restarting": "正在重启",
    "not started: {why}": "未开机：{why}",
    "delete requested": "已请求删除",
    "stopped; data kept": "已关机；数据保留",
    "{reason}; data kept": "{reason}；数据保留",
    "{reason}; stopped, waiting for a healthy GPU": "{reason}；已关机，等待健康的 GPU",
    "retrying: {error}": "重试中：{error}",
    "could not start the container: {error}": "无法启动容器：{error}",
    "container disappeared; recreating": "容器消失；正在重建",
    "container exited; restarting": "容器已退出；正在重启",
    "moving: {reason}": "迁移中：{reason}",
    "sending image {image} to {host}: {done} so far": (
        "正在把镜像 {image} 发送到 {host}：已发送 {done}"
    ),
    "image {image} sent to {host}: {size}; {layers} base layer(s) were there": (
        "镜像 {image} 已发送到 {host}：{size}；其中 {layers} 个基础层那里已有"
    ),
    "the cluster ended its container ({fault})": "集群终止了它的容器（{fault}）",
    "moving: waiting for a healthy {what} on another host than {host}, which ended it; "
    "{host} takes it again after {until}": (
        "迁移中：等待另一台主机（非 {host}，它终止了该实例）上健康的 {what}；"
        "{until} 之后 {host} 可再次接收"
    ),
    "moving data to {host}: {done} of {total}": "正在把数据迁移到 {host}：{done} / {total}",
    "moving data to {host}: {done} so far": "正在把数据迁移到 {host}：已迁移 {done}",
    "moving the system disk to {host}: {done} so far": "正在把系统盘迁移到 {host}：已迁移 {done}",
    "the system disk moved to {host}: {size} sent; {layers} base layer(s) were there": (
        "系统盘已迁移到 {host}：发送了 {size}；其基础镜像的 {layers} 层那里已有"
    ),
    "the data copy to {host} resumed where it stopped: {sent} of {total} sent again": (
        "迁移到 {host} 的数据从中断处继续：{total} 中重新发送了 {sent}"
    ),
    "started on {host}: its host had no free {model}": (
        "已在 {host} 上开机：原主机没有空闲的 {model}"
    ),
    "GPU {index} of {host} is {state}; moving to a healthy GPU": (
        "{host} 的 GPU {index} 状态为 {state}；正在迁移到健康的 GPU"
    ),
    "GPU {index} of host {host} reported {fault}: usually the program's own error; the GPU stays "
    "in service": (
        "主机 {host} 的 GPU {index} 报告 {fault}：通常是程序自身的错误；该 GPU 继续服务"
    ),
    "GPU {index} of host {host} reported {fault}; gpudock will move this instance to a healthy "
    "GPU at its next restart or stop (restart it now to move it now)": (
        "主机 {host} 的 GPU {index} 报告 {fault}；gpudock "
        "会在下次重启或关机时把该实例迁移到健康的 GPU（现在重启即可立即迁移）"
    ),
    "GPU {index} of host {host}: {fault}": "主机 {host} 的 GPU {index}：{fault}",
    "stopped: user {name} disabled by {admin}": "已关机：用户 {name} 被 {admin} 停用",
    "stopped: user {name} disabled by {admin} ({why})": (
        "已关机：用户 {name} 被 {admin} 停用（{why}）"
    ),
    "system disk {used} of {limit}: an instance over its system disk is stopped (its data kept); "
    "keep large files in /root/data, the data volume": (
        "系统盘已用 {used} / {limit}：超出系统盘的实例会被关机（数据保留）；大文件请放在数据盘 "
        "/root/data"
    ),
    "stopped: the system disk holds {used}, over its {limit}; container and data kept. Start it, "
    "delete files outside /root/data, or save it and create a bigger one (system_disk_gb)": (
        "已关机：系统盘已用 {used}，超过上限 {limit}；容器和数据保留。请开机后删除 /root/data "
        "之外的文件，或保存为镜像后创建更大的实例（system_disk_gb）"
    ),
    "at the next placement pass: capacity for it is free now": "下一轮调度时：现在已有空闲容量",
    "unknown: the instances holding these GPUs run until their owners stop them, and gpudock has "
    "no run-time limit to go by": (
        "未知：占用这些 GPU 的实例会一直运行到其所有者关机，gpudock 没有运行时长上限可参考"
    ),
    "host unreachable for {seconds} s: {why}": "主机已失联 {seconds} 秒：{why}",
    "host {host} lost: no heartbeat since {since}; waiting for it (the data is there)": (
        "主机 {host} 失联：自 {since} 起无心跳；等待其恢复（数据在该主机上）"
    ),
    "running on {host} again: its host is back": "主机已恢复，重新运行于 {host}",
    "host {host} was removed (its agent revoked)": "主机 {host} 已被移除（其代理已吊销）",
    "host {host} lost; restarting elsewhere with an empty data volume "
    "(the old one stays on {host})": (
        "主机 {host} 失联；在其他主机以空数据卷重启（原数据卷留在 {host}）"
    ),
    "{reason}; waiting for it": "{reason}；等待其恢复",
    # billing: stops, warnings, ledger lines
    "billing: stopped: the balance left ({money}) does not cover the next {period} s at {rate}; "
    "top up (ask an admin) and start again": (
        "计费：已关机：剩余余额（{money}）不足以支付接下来 {period} "
        "秒（{rate}）；请充值（联系管理员）后重新开机"
    ),
    "billing: stopped: the monthly budget left ({money}) does not cover the next {period} s at "
    "{rate}; raise or clear the monthly budget (console: Billing; CLI: `gpudock billing budget "
    "AMOUNT` or `--clear`) and start again": (
        "计费：已关机：剩余月度预算（{money}）不足以支付接下来 {period} "
        "秒（{rate}）；请提高或清除月度预算（控制台：账单；命令行：`gpudock billing budget "
        "AMOUNT` 或 `--clear`）后重新开机"
    ),
    "billing: low balance: {money} left, about {minutes} min at {rate}; running instances stop "
    "(data kept) when it runs out": (
        "计费：余额不足：剩余 {money}，按 {rate} 约可用 {minutes} "
        "分钟；用完时运行中的实例将关机（数据保留）"
    ),
    "billing: low monthly budget: {money} left, about {minutes} min at {rate}; running instances "
    "stop (data kept) when it runs out": (
        "计费：月度预算不足：剩余 {money}，按 {rate} 约可用 {minutes} "
        "分钟；用完时运行中的实例将关机（数据保留）"
    ),
    "{seconds} s × {count} × {model} at {rate}/h": (
        "{seconds} 秒 × {count} × {model}，单价 {rate}/小时"
    ),
    "{seconds} s × no-GPU at {rate}/h": "{seconds} 秒 × 无卡实例，单价 {rate}/小时",
    "{seconds} s × {disk} GB stopped disk at {rate}/day": (
        "{seconds} 秒 × {disk} GB 关机磁盘，单价 {rate}/天"
    ),
    "refund of {charge} charged ahead of the stop": "退还关机前预扣的 {charge}",
    "top-up by {admin}": "由 {admin} 充值",
    "balance {available} {currency} does not cover {seconds} s of {what}: {needed} {currency} is "
    "needed; ask an admin for a top-up": (
        "余额 {available} {currency} 不足以支付 {seconds} 秒的 {what}：需要 {needed} "
        "{currency}；请联系管理员充值"
    ),
    "balance {available} {currency} does not cover {seconds} s of {what} beside what you run or "
    "have waiting ({others}): {needed} {currency} is needed; ask an admin for a top-up": (
        "余额 {available} {currency} 不足以支付 {seconds} 秒的 {what}（另有运行或排队中的实例 "
        "{others}）：需要 {needed} {currency}；请联系管理员充值"
    ),
    "this month's budget of {budget} {currency} has {left} {currency} left, less than {period} s "
    "of {what}; raise it on the Billing page or with `gpudock billing budget`": (
        "本月预算 {budget} {currency} 仅剩 {left} {currency}，不足 {period} 秒的 "
        "{what}；请在“账单”页面或用 `gpudock billing budget` 提高预算"
    ),
    "{count} × {model} at {rate}": "{count} × {model}，{rate}",
    "a no-GPU instance at {rate}": "无卡实例，{rate}",
    # image verdicts (✗ and ? reasons)
    "CUDA {cuda} needs NVIDIA driver >= {needed}, this one is {driver} (it supports CUDA up to "
    "{max_cuda})": (
        "CUDA {cuda} 需要 NVIDIA 驱动 >= {needed}，当前为 {driver}（最高支持 CUDA {max_cuda}）"
    ),
    "nothing gpudock knows": "gpudock 所知的任何版本",
    "CUDA minor-version compatibility (>= {minor}) runs it only with a limited feature set (no "
    "PTX JIT)": ("CUDA 小版本兼容（>= {minor}）只能以受限功能运行（无 PTX JIT）"),
    "CUDA {cuda} supports compute capability {low}–{high}; this GPU is {cc} ({sm})": (
        "CUDA {cuda} 支持的计算能力为 {low}–{high}；此 GPU 为 {cc}（{sm}）"
    ),
    "GPU architecture {sm} is not in this build ({archs}): kernels fail with 'no kernel image is "
    "available for execution on the device'": (
        "此构建不含 GPU 架构 {sm}（仅含 {archs}）：内核会报错 'no kernel image is available for "
        "execution on the device'"
    ),
    "{family} GPUs get no driver after the R{branch} branch, so no driver upgrade fixes this: "
    "CUDA {newest} is the newest toolkit R{branch} runs": (
        "{family} GPU 在 R{branch} 分支之后不再有驱动，升级驱动无法解决：R{branch} "
        "能运行的最新工具包是 CUDA {newest}"
    ),
    "CUDA {cuda} is not in gpudock's compatibility data: its driver and GPU needs were not "
    "checked": ("CUDA {cuda} 不在 gpudock 的兼容性数据中：未检查其驱动和 GPU 要求"),
    "CUDA {cuda}'s minimum driver is not in gpudock's data": (
        "gpudock 的数据中没有 CUDA {cuda} 的最低驱动版本"
    ),
    "CUDA {cuda} is newer than gpudock's data for CUDA {major_minor}: the driver was checked "
    "only against the newest update it lists (>= {needed})": (
        "CUDA {cuda} 比 gpudock 关于 CUDA {major_minor} 的数据更新：驱动仅按其列出的最新更新（>= "
        "{needed}）检查"
    ),
    "the GPU architectures CUDA {cuda} supports are not in gpudock's data": (
        "gpudock 的数据中没有 CUDA {cuda} 支持的 GPU 架构"
    ),
    "unknown: {what}": "未检查：{what}",
    "image {image} on {model} not checked: {what}": "镜像 {image} 未在 {model} 上检查：{what}",
    "image {image} cannot run on {model} here: {reason}. Images that can: {images}. GPU models "
    "that can run {image}: {models}": (
        "镜像 {image} 无法在本集群的 {model} 上运行：{reason}。可用的镜像：{images}。可运行 "
        "{image} 的 GPU 型号：{models}"
    ),
    "none known": "暂无",
    "none in this fleet": "本集群没有",
    "compatibility unknown: the image's entry could not be read": (
        "兼容性未知：无法读取该镜像的条目"
    ),
    # errors a user meets in the console, the API and the CLI
    "no instance {ref}: the console's Instances page or `gpudock instances list` shows yours": (
        "没有实例 {ref}：控制台的“实例”页面或 `gpudock instances list` 会列出你的实例"
    ),
    "you already have an instance named {name}": "你已有名为 {name} 的实例",
    "name must be 1-63 characters: lower-case letters, digits and '-', starting with a letter or "
    "digit": ("名称须为 1–63 个字符：小写字母、数字和“-”，以字母或数字开头"),
    "count must be a whole number from {low} to {high}": "数量必须是 {low} 到 {high} 的整数",
    "count must be at most {n}: no {model} host has more": (
        "数量最多为 {n}：没有主机拥有更多的 {model}"
    ),
    "disk must be a whole number of GB from {low} to {high}": (
        "磁盘大小必须是 {low} 到 {high} 之间的整数 GB"
    ),
    "no GPU model {model}: choose one from the list": "没有 GPU 型号 {model}：请从列表中选择",
    "image {image} cannot run on {model}: choose an image marked ✓ or another GPU model": (
        "镜像 {image} 无法在 {model} 上运行：请选择标有 ✓ 的镜像或其他 GPU 型号"
    ),
    "instance {name} is {status}: start it with Start on its page in the console, or run "
    "`gpudock instances start {name}`": (
        "实例 {name} {status}：请在控制台的实例页面点击“开机”，或运行 `gpudock instances start "
        "{name}`"
    ),
    "instance {name} failed ({reason}): start it again with Start on its page in the console, or "
    "run `gpudock instances start {name}`": (
        "实例 {name} 失败（{reason}）：请在控制台的实例页面点击“开机”重试，或运行 `gpudock "
        "instances start {name}`"
    ),
    "instance {name} is being deleted": "实例 {name} 正在删除",
    "instance {name} is {status} ({reason}): try again once its page in the console or `gpudock "
    "instances show {name}` says running": (
        "实例 {name} {status}（{reason}）：请等控制台的实例页面或 `gpudock instances show "
        "{name}` 显示运行中后重试"
    ),
    "bad instance name {name}: use 1-63 lowercase letters, digits and '-', starting and "
    "ending with a letter or digit": (
        "实例名称 {name} 无效：请使用 1–63 个小写字母、数字或“-”，并以字母或数字开头和结尾"
    ),
    "gpu_count {count} is more than any host has: at most {largest} × {models} fit on one "
    "host": "GPU 数量 {count} 超过任何主机所有：单机最多 {largest} × {models}",
    "unknown GPU model {model}; available: {models}": "未知 GPU 型号 {model}；可选：{models}",
    "none": "无",
    "disk_gb must be 1..{most}": "磁盘大小必须在 1 到 {most} GB 之间",
    "GPU count must be a whole number from 0 to {most}: no {model} host has more": (
        "GPU 数量必须是 0 到 {most} 的整数：没有主机拥有更多的 {model}"
    ),
    "GPU count must be a whole number from 0 to {most}": "GPU 数量必须是 0 到 {most} 的整数",
    "disk must be a whole number of GB from 1 to {most}": (
        "磁盘大小必须是 1 到 {most} 之间的整数 GB"
    ),
    "{image} needs driver >= {needed}, this is {driver}": (
        "{image} 需要驱动 >= {needed}，当前为 {driver}"
    ),
    "Deleted: the user's instances (containers, data volumes and saved system disks, removed "
    "by the reconciler), SSH keys, console password and sessions; their API tokens are "
    "revoked. Kept: the user record, marked deleted (the name stays taken, so their "
    "statements stay addressable by it), instance records and events, the SSH audit, billing "
    "intervals and ledger postings (append-only: the balance stays as it is, and final "
    "charges of the deleted instances are still posted), and private images, which admins "
    "see and remove with `gpudock images remove`.": (
        "删除：该用户的实例（容器、数据卷和保存的系统盘，由后台协调器清除）、SSH 密钥、"
        "控制台密码和会话；其 API 令牌被吊销。保留：用户记录（标记为已删除，名称仍被占用，"
        "以便按名称查询其账单）、实例记录和事件、SSH 审计、计费区间和流水（只追加：余额保持不变，"
        "已删除实例的最终费用仍会入账），以及私有镜像，管理员可查看并用 "
        "`gpudock images remove` 删除。"
    ),
    "gpudock does not know this GPU model's compute capability: the image's GPU "
    "architectures were not checked": "gpudock 不知道该 GPU 型号的计算能力：未检查镜像的 GPU 架构",
    "there is no page at {path}": "没有页面 {path}",
    "the server could not show this page; the error is in the server's log": (
        "服务器无法显示此页面；错误已记录在服务器日志中"
    ),
    "this page is for admins": "此页面仅限管理员",
    "missing or wrong CSRF token: reload the page and try again": (
        "CSRF 令牌缺失或错误：请刷新页面后重试"
    ),
    "not found": "未找到",
    # what the fence kept on an agent host (services/fleet/kept.py)
    "the instance was deleted": "该实例已被删除",
    "the instance lives on host {host} now": "该实例现在位于主机 {host}",
    "no agent host '{host}': `gpudock hosts list` shows them": (
        "没有代理主机 '{host}'：`gpudock hosts list` 会列出所有代理主机"
    ),
    "host {host}'s agent is not connected to this server: what it keeps can be seen once its "
    "link is up (`gpudock hosts list`)": (
        "主机 {host} 的代理未连接到本服务器：连接恢复后才能查看它保留的内容（`gpudock hosts list`）"
    ),
    "host {host} keeps no container of instance {instance}: `gpudock hosts kept {host}` lists "
    "what it keeps": (
        "主机 {host} 没有保留实例 {instance} 的容器：`gpudock hosts kept {host}` 会列出它保留的内容"
    ),
    "only the data volume of instance {instance} is left on {host}: remove it with its data "
    "(--with-data)": "实例 {instance} 在 {host} 上只剩数据卷：请连同数据一起删除（--with-data）",
    "instance {instance} is changing now: try again in a moment": (
        "实例 {instance} 正在变更：请稍后重试"
    ),
    "instance {instance} is not settled elsewhere now: not removed": (
        "实例 {instance} 目前未在其他主机上落定：未删除"
    ),
    # statuses, when a message names one
    "pending": "排队中",
    "creating": "创建中",
    "running": "运行中",
    "stopping": "关机中",
    "stopped": "已关机",
    "starting": "开机中",
    "deleting": "删除中",
    "migrating": "迁移中",
    "unreachable": "主机失联",
    "deleted": "已删除",
    "failed": "失败",
    "healthy": "正常",
    "draining": "排空中",
    "unhealthy": "故障",
    "repairing": "维修中",
}

CATALOGS: dict[str, dict[str, str]] = {"en": {}, "zh-CN": ZH_CN_MESSAGES}
