"""The console's message catalog: English is the key, Simplified Chinese the translation.

A string missing from a catalog falls back to English, so a new page never
shows a blank. What services say (reasons, events, errors, ledger lines) is in
`gpudock.messages.catalog`, shared with the API; the translator looks in both.
Entries here are plain strings: `{name}` fields for the values a sentence
takes, whole sentences, never glued fragments. tests/web/test_zh_cn_crawl.py
finds any English left on a page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpudock.messages import Message, localize, negotiate
from gpudock.messages.catalog import ZH_CN_MESSAGES

LANGUAGES = {"en": "English", "zh-CN": "简体中文"}
DEFAULT_LANGUAGE = "en"
LANG_COOKIE = "gpudock_lang"

ZH_CN: dict[str, str] = {
    # navigation and layout
    "Dashboard": "概览",
    "Instances": "实例",
    "New instance": "创建实例",
    "Hosts & GPUs": "主机与 GPU",
    "Users": "用户",
    "Account": "账户",
    "Log out": "退出登录",
    "on the host": "已在主机上",
    "not on the host: pulled from its registry at first use": (
        "不在主机上：首次使用时从镜像仓库拉取"
    ),
    "Menu": "菜单",
    "Log in": "登录",
    "Billing": "账单",
    "SSH keys": "SSH 密钥",
    "Images": "镜像",
    "Operator": "运维",
    "Language": "语言",
    "Self-hosted GPU cloud": "自托管 GPU 云",
    # login and account
    "User name": "用户名",
    "Password": "密码",
    "Current password": "当前密码",
    "New password": "新密码",
    "Repeat the new password": "再次输入新密码",
    "Change password": "修改密码",
    "Password changed.": "密码已修改。",
    "the two new passwords differ": "两次输入的新密码不一致",
    "wrong user name or password": "用户名或密码错误",
    "No password yet? An admin sets one with": "还没有密码？管理员可以用以下命令设置",
    "Signed in as": "当前用户",
    "admin": "管理员",
    # dashboard
    "Running instances": "运行中的实例",
    "All instances": "全部实例",
    "GPUs in use": "使用中的 GPU",
    "Free GPUs": "空闲 GPU",
    "Free GPUs by model": "各型号空闲 GPU",
    "Model": "型号",
    "Memory": "内存",
    "GPU memory": "显存",
    "Free": "空闲",
    "Total": "合计",
    "Hosts": "主机",
    "Max per host": "单机最多",
    "Price / hour": "每小时价格",
    "Nothing is running.": "没有运行中的实例。",
    "No instances yet.": "还没有实例。",
    "Create one": "创建一个",
    # instances
    "Name": "名称",
    "Status": "状态",
    "GPUs": "GPU",
    "Host": "主机",
    "Image": "镜像",
    "Owner": "所有者",
    "Created": "创建时间",
    "Reason": "原因",
    "CPU": "CPU",
    "Disk": "磁盘",
    "Disk (GB)": "磁盘 (GB)",
    "cores": "核",
    "Start": "开机",
    "Stop": "关机",
    "Restart": "重启",
    "Delete": "删除",
    "Events": "事件",
    "Time": "时间",
    "Change": "变化",
    "Message": "信息",
    "Details": "详情",
    "Actions": "操作",
    "SSH": "SSH",
    "Copy": "复制",
    "Copied": "已复制",
    "Stop this instance? Its GPUs are released; its disk is kept.": (
        "确定关机吗？GPU 将被释放，磁盘数据保留。"
    ),
    (
        "Stop this instance? Its GPUs are released and /root/data is kept, but not its "
        "system disk: on Kubernetes a stopped instance's container is deleted with every "
        "file outside /root/data."
    ): (
        "确定关机吗？GPU 将被释放，/root/data 保留，但系统盘不保留："
        "在 Kubernetes 上，关机会删除容器及 /root/data 以外的所有文件。"
    ),
    (
        "On this cluster (Kubernetes) stopping an instance deletes its system disk: every "
        "file outside /root/data. Keep what you need in /root/data."
    ): (
        "本集群（Kubernetes）上关机会删除实例的系统盘，即 /root/data 以外的所有文件。"
        "需要保留的内容请放在 /root/data。"
    ),
    (
        "Stop this instance? Its GPUs are released and /root is kept, but not the rest of its "
        "system disk: on Kubernetes a stopped instance's container is deleted with every file "
        "outside /root (packages installed with apt among them)."
    ): (
        "确定关机吗？GPU 将被释放，/root 保留，但系统盘的其余部分不保留："
        "在 Kubernetes 上，关机会删除容器及 /root 以外的所有文件（包括用 apt 安装的软件包）。"
    ),
    (
        "On this cluster (Kubernetes) stopping an instance deletes every file outside /root "
        "(packages installed with apt among them); /root and /root/data are kept."
    ): (
        "本集群（Kubernetes）上关机会删除 /root 以外的所有文件（包括用 apt 安装的软件包）；"
        "/root 和 /root/data 会保留。"
    ),
    "Restart this instance?": "确定重启该实例吗？",
    "Delete this instance and its data? This cannot be undone.": (
        "确定删除该实例及其数据吗？此操作不可撤销。"
    ),
    "Start this instance?": "确定开机吗？",
    "GPU model": "GPU 型号",
    "GPU count": "GPU 数量",
    "No GPU (CPU only)": "无卡模式（仅 CPU）",
    "free": "空闲",
    "of": "/",
    "at most {n} on one host": "单机最多 {n} 张",
    "Create": "创建",
    "Fix the problem below and try again.": "请修正以下问题后重试。",
    "Fix the problems marked below and try again.": "请修正下方标出的问题后重试。",
    "1 to {n} GB; the data disk, /root/data": "1 到 {n} GB；数据盘，即 /root/data",
    "optional: lower-case letters, digits and '-'; a name is made up if empty": (
        "可选：小写字母、数字和“-”；留空则自动生成"
    ),
    "ID": "ID",
    "Page {page} of {pages}": "第 {page} / {pages} 页",
    "{n} instances": "共 {n} 个实例",
    "Not found": "未找到",
    "Forbidden": "无权访问",
    "Not enough balance": "余额不足",
    "Something went wrong": "出错了",
    "Back to the dashboard": "返回概览",
    "updates every 2 s": "每 2 秒自动刷新",
    # statuses
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
    # billing, SSH keys, images
    "Balance": "余额",
    "Available": "可用",
    "Spending per hour": "每小时消费",
    "money on the account: top-ups less what has been charged": "账户中的钱：充值减去已扣费",
    "the balance less what running instances have used since their last charge": (
        "余额减去运行中实例自上次扣费以来的用量"
    ),
    "nothing running that costs money": "没有正在计费的实例",
    "lasts about {time} at this rate": "按此速度约可用 {time}",
    "charges since the 1st (UTC)": "本月 1 日（UTC）以来的扣费",
    "Spent this month": "本月已消费",
    "Prices": "价格",
    "Kind": "类别",
    "Price": "价格",
    "No prices set: everything is free.": "尚未设置价格：全部免费。",
    "Type": "类型",
    "Fingerprint": "指纹",
    "Last used": "最近使用",
    "No keys yet.": "还没有密钥。",
    "Framework": "框架",
    "OS": "系统",
    "Visibility": "可见性",
    # operator pages
    "Driver": "驱动",
    "CUDA": "CUDA",
    "simulated": "模拟",
    "absent": "离线",
    "Hosts with agents": "带代理的主机",
    "Link": "连接",
    "Last heartbeat": "最近心跳",
    "Agent": "代理",
    "agent": "代理",
    "Engine": "引擎",
    "Labels": "标签",
    "waiting for its agent": "等待代理加入",
    "lost": "失联",
    "link up": "已连接",
    "link down": "已断开",
    "never linked": "从未连接",
    "Index": "序号",
    "State": "状态",
    "Tenant": "租户",
    "Instance": "实例",
    "NUMA": "NUMA",
    "Create user": "创建用户",
    "active": "正常",
    "disabled": "已停用",
    "expired": "已过期",
    "revoked": "已吊销",
    "Disable": "停用",
    "Enable": "启用",
    "reason (optional)": "原因（可选）",
    "with their instances and data": "连同其实例与数据",
    "Deleting a user:": "删除用户：",
    "Delete this user? This cannot be undone.": "确定删除该用户吗？此操作不可撤销。",
    "Disable this user? Their tokens, console sessions and SSH keys stop working at once; "
    "their instances stop (data kept).": (
        "确定停用该用户吗？其 API 令牌、控制台会话和 SSH 密钥立即失效；其实例将关机（数据保留）。"
    ),
    # what the fence kept on an agent host
    "What the fence kept": "隔离后保留的内容",
    "Containers and old data volumes of instances that moved to another host, or were "
    "deleted, while their host was out of reach: stopped, never removed, until you remove "
    "them. Its link must be up to read a host's list.": (
        "主机失联期间迁移到其他主机或被删除的实例，其容器和旧数据卷：只停止、从不自动删除，"
        "直到你删除它们。主机连接正常时才能读取其列表。"
    ),
    "Nothing kept here.": "此主机没有保留任何内容。",
    "Container": "容器",
    "Old data volume": "旧数据卷",
    "Why it is kept": "保留原因",
    "removed: only its data volume is left": "已删除：只剩其数据卷",
    "also remove its old data volume": "同时删除其旧数据卷",
    "Remove its old data volume": "删除其旧数据卷",
    "Remove what this host kept of the instance? This cannot be undone.": (
        "确定删除此主机为该实例保留的内容吗？此操作不可撤销。"
    ),
    "Removed the old data volume {host} kept of instance {instance}.": (
        "已删除 {host} 为实例 {instance} 保留的旧数据卷。"
    ),
    "Removed the container and the old data volume {host} kept of instance {instance}.": (
        "已删除 {host} 为实例 {instance} 保留的容器和旧数据卷。"
    ),
    "Removed the container {host} kept of instance {instance}; its old data volume stays "
    "there until you remove it too.": (
        "已删除 {host} 为实例 {instance} 保留的容器；其旧数据卷仍留在该主机上，直到你也删除它。"
    ),
    "Removed the container {host} kept of instance {instance}.": (
        "已删除 {host} 为实例 {instance} 保留的容器。"
    ),
    # API tokens
    "API tokens": "API 令牌",
    "Expires": "过期时间",
    "never": "永不",
    "in {d}": "{d} 后",
    "Revoke": "吊销",
    "No tokens.": "没有令牌。",
    "Create a token": "创建令牌",
    "Create token": "创建令牌",
    "Use it with": "使用方法",
    "Token {name} created. Copy it now: it is not shown again.": (
        "令牌 {name} 已创建。请立即复制：它不会再次显示。"
    ),
    "Revoke this token? Anything using it stops working at once.": (
        "确定吊销该令牌吗？所有使用它的程序将立即失效。"
    ),
    "Admin": "管理员",
    "yes": "是",
    "optional: lets the user log in to this console": "可选：设置后用户可登录控制台",
    "User {name} created. Their API token (shown once):": (
        "已创建用户 {name}。其 API 令牌（仅显示一次）："
    ),
    # create form: price, shortage and image compatibility
    "Estimated cost": "预计费用",
    "per hour": "每小时",
    "Only {free} free now: the instance waits in the queue until GPUs free up.": (
        "当前仅 {free} 张空闲：实例将排队等待 GPU 释放。"
    ),
    "No host has {n} of these GPUs.": "没有主机拥有 {n} 张该型号 GPU。",
    "Not in the catalog: it is checked when the instance is created.": (
        "不在镜像目录中：创建实例时再检查。"
    ),
    "Runs on {model}": "可在 {model} 上运行",
    "Runs without a GPU": "可在无卡模式下运行",
    "Cannot run on {model}": "无法在 {model} 上运行",
    "Not checked on {model}": "未在 {model} 上检查",
    "Images that can": "可用的镜像",
    "GPU models that can run it": "可运行它的 GPU 型号",
    # instance detail: SSH audit, save as image
    "SSH sessions": "SSH 会话",
    "Started": "开始",
    "Ended": "结束",
    "Outcome": "结果",
    "From": "来源",
    "Key": "密钥",
    "Bytes in / out": "上行 / 下行字节",
    "open": "进行中",
    "closed": "已结束",
    "refused": "已拒绝",
    "No SSH sessions yet.": "还没有 SSH 会话。",
    "Save as image": "保存为镜像",
    "Saves the system disk (the container's files) as a private image; the data volume "
    "(/root/data) is not included.": (
        "将系统盘（容器内的文件）保存为私有镜像；数据盘（/root/data）不包含在内。"
    ),
    "Image name": "镜像名称",
    # instance detail: current use
    "Current use": "当前用量",
    "measuring…": "测量中…",
    "of {n} cores": "（上限 {n} 核）",
    "no limit": "无上限",
    "Processes": "进程数",
    "utilisation: n/a (simulated)": "利用率：不可用（模拟 GPU）",
    "utilisation: n/a": "利用率：不可用",
    # instance detail: the Connect panel; the dashboard's first step
    "Connect": "连接",
    "You have no SSH key yet, so nothing can log in. Add your public key first:": (
        "你还没有 SSH 密钥，因此无法登录。请先添加你的公钥："
    ),
    "None of your keys is accepted: this server refuses keys registered without a proof. "
    "Add one again on the SSH keys page.": (
        "你的密钥都不被接受：本服务器拒绝未经持有证明登记的密钥。请在“SSH 密钥”页面重新添加。"
    ),
    "Keys that log in:": "可登录的密钥：",
    "Manage SSH keys": "管理 SSH 密钥",
    "The instance is not running: start it (Start above, or `gpudock instances start "
    "{ref}`), then connect.": (
        "实例未在运行：请先开机（点击上方“开机”，或运行 `gpudock instances start {ref}`），再连接。"
    ),
    "The lines use {identity}: the private key of a key listed above; change the path if "
    "yours is elsewhere.": (
        "以下命令使用 {identity}，即上面所列某个密钥的私钥；如果你的私钥在别处，请修改路径。"
    ),
    "Terminal": "终端",
    "Copy a file": "复制文件",
    "Sync a folder": "同步文件夹",
    "Open a port locally (Jupyter on 8888)": "在本地打开端口（Jupyter 用 8888）",
    "VS Code Remote-SSH (after the ~/.ssh/config entry below)": (
        "VS Code Remote-SSH（需先添加下方的 ~/.ssh/config 条目）"
    ),
    "Append this to ~/.ssh/config, then `ssh {alias}` works, and so do scp, rsync and VS Code "
    "by that name. `gpudock ssh-config -i KEY` prints it for all your instances and pins the "
    "host key.": (
        "把这段追加到 ~/.ssh/config 后，`ssh {alias}` 即可登录，"
        "scp、rsync 和 VS Code 也可用这个名字。"
        "`gpudock ssh-config -i KEY` 会为你的所有实例输出此配置并固定主机密钥。"
    ),
    "The gateway's host key, to compare on the first connection:": (
        "网关的主机密钥（首次连接时核对）："
    ),
    "To log in to an instance, add your SSH public key first.": (
        "要登录实例，请先添加你的 SSH 公钥。"
    ),
    "The gateway lets in only keys registered here; it takes a minute.": (
        "网关只接受在此登记的密钥；只需一分钟。"
    ),
    "Add an SSH key": "添加 SSH 密钥",
    # SSH keys
    "Add a key": "添加密钥",
    "Public key": "公钥",
    "The one line of your .pub file; make a key with": "即 .pub 文件中的那一行；可用以下命令生成",
    "optional; the key comment if empty": "可选；留空则使用密钥注释",
    "Add key": "添加",
    "Remove": "移除",
    "Remove this key? It can no longer open SSH sessions.": (
        "确定移除该密钥吗？移除后无法再用它登录 SSH。"
    ),
    "Proof": "持有证明",
    "proven": "已证明",
    "unproven": "未证明",
    "Keys marked unproven were registered before adding a key needed a proof. Prove each one: "
    "add it again below, or run gpudock keys add with its private key. The server may stop "
    "accepting unproven keys.": (
        "标为“未证明”的密钥是在添加密钥需要持有证明之前登记的。请逐个证明：在下方重新添加，"
        "或用其私钥运行 gpudock keys add。服务器可能会停止接受未证明的密钥。"
    ),
    "Adding a key takes proof that you hold its private key. The quickest way:": (
        "添加密钥需要证明你持有其私钥。最快的方法："
    ),
    "In a terminal, sign this challenge with the key (use your key's path; the private key "
    "never leaves your machine):": (
        "在终端中用该密钥签署此挑战（换成你的密钥路径；私钥不会离开你的电脑）："
    ),
    "Valid until": "有效期至",
    "Signature": "签名",
    "Everything the command printed, from BEGIN to END SSH SIGNATURE": (
        "命令输出的全部内容，从 BEGIN 到 END SSH SIGNATURE"
    ),
    # billing
    "{n} days": "{n} 天",
    "Spending per day": "每日消费",
    "Nothing spent in this period.": "此期间没有消费。",
    "Usage by instance": "按实例统计用量",
    "Download CSV": "下载 CSV",
    "Running time": "运行时长",
    "GPU hours": "GPU 小时",
    "Compute": "计算",
    "Stopped disk": "关机磁盘",
    "No usage in this period.": "此期间没有用量。",
    "Ledger": "流水",
    "newest first": "最新在前",
    "Description": "说明",
    "Amount": "金额",
    "No ledger lines yet.": "还没有流水。",
    "topup": "充值",
    "compute": "计算",
    "storage": "存储",
    "refund": "退款",
    "gpu": "GPU",
    "no_gpu": "无卡",
    "disk": "磁盘",
    "per GPU-hour": "每卡每小时",
    "per GB-day": "每 GB 每天",
    "Monthly budget": "月度预算",
    "Running instances stop when this month's charges reach it. Empty: no budget.": (
        "本月费用达到预算时，运行中的实例将被关机。留空表示不设预算。"
    ),
    "Save": "保存",
    # operator billing
    "Prices & top-ups": "价格与充值",
    "Credited {amount} {currency} to {name}; their balance is now {balance} {currency}.": (
        "已为 {name} 充值 {amount} {currency}；当前余额 {balance} {currency}。"
    ),
    "Price saved: {what} costs {amount} {currency} {unit}.": (
        "价格已保存：{what} 为 {amount} {currency} {unit}。"
    ),
    "Changed": "修改时间",
    "Set a price": "设置价格",
    "only for the kind 'gpu'": "仅用于 GPU 类别",
    "0 makes it free": "0 表示免费",
    "Save price": "保存价格",
    "Top up a wallet": "为用户充值",
    "Wallets": "用户余额",
    "Latest top-ups": "最近充值",
    "No top-ups yet.": "还没有充值记录。",
    "choose a user": "选择用户",
    "User": "用户",
    "Note": "备注",
    "optional: shown on the user's ledger": "可选：显示在用户的流水中",
    "Top up": "充值",
    # images
    "Built {ref}: it is in the list below and on the create form.": (
        "已构建 {ref}：可在下方列表和创建实例表单中使用。"
    ),
    "Size": "大小",
    "Runs on this GPU model here?": "能否在本集群的该型号 GPU 上运行？",
    "public": "公开",
    "private": "私有",
    "build": "构建",
    "save": "保存",
    "manual": "手动登记",
    "validated": "已验证",
    "Delete this image?": "确定删除该镜像吗？",
    "whether the image's CUDA and architectures fit the drivers and GPUs of this fleet "
    "(hover ✗ for the reason).": (
        "镜像的 CUDA 与架构是否匹配本集群的驱动和 GPU（鼠标悬停 ✗ 查看原因）。"
    ),
    "?: not checked, as gpudock's compatibility data does not cover it (hover for what).": (
        "?：gpudock 的兼容性数据未覆盖，未做检查（鼠标悬停查看未检查的内容）。"
    ),
    "To save an instance as an image, open the instance.": "要将实例保存为镜像，请打开该实例。",
    "Build an image": "构建镜像",
    "From a Dockerfile with no other files; the build waits until it ends. For a build "
    "context, use": "仅使用 Dockerfile（无其他文件），页面会等待构建完成。需要构建上下文时，请使用",
    "Build": "构建",
    "Build log": "构建日志",
    # GPU health and reliability (operators)
    "Reliability": "可靠性",
    "Inject a fault": "注入故障",
    "GPU": "GPU",
    "The GPU reports this Xid as NVML would; gpudock reacts as it would to a real one "
    "(tenants are moved, the GPU leaves service).": (
        "该 GPU 会像 NVML 一样上报此 Xid；gpudock 的处理与真实故障相同（迁移租户，GPU 退出服务）。"
    ),
    "optional": "可选",
    "Inject fault": "注入故障",
    "Repair": "修复",
    "Put this GPU back into service?": "确定让该 GPU 重新投入服务吗？",
    "By GPU model": "按 GPU 型号",
    "By GPU": "按 GPU",
    "Hours in service": "服务小时数",
    "Failures": "故障次数",
    "MTBF (h)": "平均故障间隔 (小时)",
    "Published MTBF (h)": "公开数据 MTBF (小时)",
    "Migrations": "迁移次数",
    "Interruption p50 / max": "中断时长 p50 / 最大",
    "Faults": "故障",
    "Latest faults": "最近的故障",
    "Action": "处理",
    "Source": "来源",
    "Repaired": "修复时间",
    "No faults yet.": "还没有故障。",
    "nvml": "NVML",
    "runtime": "运行时",
    # shares of one GPU, the wait queue
    "What to rent": "租用方式",
    "Whole GPUs": "整卡",
    "A share of one GPU": "单卡的一部分",
    "Share of a GPU": "GPU 份额",
    "of the card": "张卡",
    "GB of its memory": "GB 显存",
    "Only with “A share of one GPU”; the share pays its part of the GPU's price.": (
        "仅用于“单卡的一部分”；按所占比例支付该 GPU 的价格。"
    ),
    "A {share} share of one {model}: {memory} of its GPU memory.": (
        "一张 {model} 的 {share}：{memory} 显存。"
    ),
    "The largest share free now is {free} of a card: the instance waits in the queue "
    "until one frees up.": "当前最大空闲份额为 {free} 张卡：实例将排队等待，直到有份额空出。",
    "GPU memory limit": "显存上限",
    "Queue": "队列",
    "{position} of {waiting} waiting for these GPUs": (
        "等待这些 GPU 的 {waiting} 个实例中的第 {position} 个"
    ),
    "Estimate": "预计",
    "Free for shares": "可分份额",
    "Largest share": "最大份额",
    "{free} of the card free for shares": "该卡还有 {free} 可分",
    # --- web terminal ---
    "Open terminal": "打开终端",
    "Close terminal": "关闭终端",
    "Connecting…": "正在连接…",
    "Connected": "已连接",
    "Connection lost: reconnecting…": "连接已断开：正在重连…",
    "Closed": "已关闭",
    "A new shell: the previous one has ended": "新的 shell：之前的已结束",
    "This shell was opened in another tab or window": "此 shell 已在另一个标签页或窗口中打开",
    "The shell exited with status {status}": "shell 已退出，状态码 {status}",
    "A login shell in the instance, like SSH. If the connection drops, the page "
    "reconnects to the same shell within {grace} s.": (
        "实例中的登录 shell，与 SSH 相同。连接断开时，页面会在 {grace} 秒内重连到同一个 shell。"
    ),
    "browser terminal": "浏览器终端",
    "console login": "控制台登录",
    # --- auto-stop and notifications ---
    "Notifications": "通知",
    "Auto-stop": "自动关机",
    "Runs until you stop it.": "一直运行，直到你关机。",
    "A stop releases the GPUs and keeps the data; billing ends when the container stops. "
    "You are told 10 minutes before an idle stop.": (
        "关机会释放 GPU 并保留数据；容器停止时计费结束。空闲关机前 10 分钟会通知你。"
    ),
    "Stop when idle for (minutes)": "空闲多久后关机（分钟）",
    "Idle means every GPU below (%)": "空闲指所有 GPU 利用率低于（%）",
    "Stop at (UTC)": "定时关机（UTC）",
    "Stop when the main process exits": "主进程退出时关机",
    "Save auto-stop": "保存自动关机设置",
    "Webhook {url} added. Copy its signing secret now: it is not shown again.": (
        "已添加 Webhook {url}。请立即复制签名密钥：它不会再次显示。"
    ),
    "No notifications yet.": "还没有通知。",
    "Webhooks": "Webhook",
    "Each notification is POSTed as JSON, signed with HMAC-SHA256 in X-Gpudock-Signature; "
    "failed deliveries are retried with backoff.": (
        "每条通知以 JSON 形式 POST，X-Gpudock-Signature 中带 HMAC-SHA256 签名；"
        "发送失败会按退避间隔重试。"
    ),
    "URL": "URL",
    "Kinds": "类型",
    "all": "全部",
    "Remove this webhook?": "删除这个 Webhook？",
    "No webhooks.": "没有 Webhook。",
    "Only these kinds (none ticked: all)": "只发送这些类型（都不勾选：全部）",
    "Add webhook": "添加 Webhook",
    "Email": "邮件",
    "Send notifications to": "通知发送到",
    "Email is off on this server: the operator sets GPUDOCK_SMTP_HOST.": (
        "此服务器未开启邮件通知：需由运维设置 GPUDOCK_SMTP_HOST。"
    ),
    "Delivery log": "发送记录",
    "To": "发往",
    "Tries": "尝试次数",
    "Last answer": "最近一次应答",
    "Nothing sent yet.": "还没有发送记录。",
    "delivered": "已送达",
    # --- monitoring: instance curves, fleet utilisation ---
    "Monitoring": "监控",
    "Time window": "时间范围",
    "last hour": "最近一小时",
    "last day": "最近一天",
    "last week": "最近一周",
    "GPU utilisation": "GPU 利用率",
    "Disk read / write": "磁盘读 / 写",
    "Network in / out": "网络收 / 发",
    "read": "读",
    "written": "写",
    "received": "接收",
    "sent": "发送",
    "Times in UTC. Older than a day: minute averages; older than 30 days: hour averages.": (
        "时间为 UTC。一天前的数据为每分钟平均值；30 天前的为每小时平均值。"
    ),
    "No samples yet: the curves appear once the instance has run for a sampling interval.": (
        "还没有采样：实例运行满一个采样间隔后即显示曲线。"
    ),
    "Mean utilisation of the GPUs instances held while they held them, from every GPU's "
    "samples; a share counts as its part of a card.": (
        "实例占用期间其 GPU 的平均利用率，按每块 GPU 的采样计算；GPU 份额按其所占比例计。"
    ),
    "In use now": "当前占用",
    "Mean utilisation": "平均利用率",
    "no samples": "无采样",
    "No GPUs yet.": "还没有 GPU。",
    # --- end monitoring ---
    # --- service URLs ---
    "Services": "服务",
    "The instance is not running: its services open once it runs.": (
        "实例未运行：运行后才能打开其服务。"
    ),
    "A link to {service}: anyone with it can open the service until you revoke its links. "
    "Copy it now: it is not shown again.": (
        "{service} 的访问链接：持有链接的任何人都能打开该服务，直到你撤销其链接。"
        "请立即复制：它不会再次显示。"
    ),
    "Port": "端口",
    "Open {service}": "打开 {service}",
    "Copy link": "复制链接",
    "Revoke links": "撤销链接",
    "Revoke every link to this service? Anyone using one loses access within seconds.": (
        "撤销该服务的所有链接？正在使用链接的人将在几秒内失去访问权限。"
    ),
    "Stop publishing this port? Its URL and links stop working.": (
        "停止发布该端口？其 URL 和链接将失效。"
    ),
    "No published ports.": "没有已发布的端口。",
    "Start JupyterLab": "启动 JupyterLab",
    "Runs JupyterLab if the image has it; gpudock installs nothing into your image.": (
        "若镜像中有 JupyterLab 则启动它；gpudock 不会向你的镜像安装任何东西。"
    ),
    "Publish port": "发布端口",
    "Publish a port": "发布一个端口",
    # --- end service URLs ---
    # --- notification kinds ---
    "the balance or monthly budget runs low": "余额或月度预算即将用完",
    "an instance stopped by itself: money, idle, time or its program exited": (
        "实例自动关机：余额不足、空闲、定时或其程序已退出"
    ),
    "an instance stops for being idle soon": "实例即将因空闲而关机",
    "an instance's GPU failed; it moves to a healthy one": "实例的 GPU 故障；正迁移到健康的 GPU",
    "an instance runs after waiting for GPUs (or after a move, or its host's return)": (
        "实例在等待 GPU（或迁移、或其主机恢复）后开始运行"
    ),
    "an instance's host was lost: it waits for it, unbilled, or restarts elsewhere": (
        "实例的主机失联：等待其恢复（期间不计费），或在别处重启"
    ),
    "a GPU model you watch has free GPUs": "你关注的 GPU 型号有空闲卡了",
    "an image build finished (built or failed)": "镜像构建已结束（成功或失败）",
}

CATALOGS: dict[str, dict[str, str]] = {"en": {}, "zh-CN": ZH_CN_MESSAGES | ZH_CN}


class Translator:
    """The templates' `t`: `t("Page {page} of {pages}", page=1, pages=3)` for the
    console's own strings, `t(text)` for a text that may be a `Message`, and
    `t.stored(text, structure)` for one read from the database with its
    structure (`gpudock.messages`)."""

    def __init__(self, language: str) -> None:
        self.language = language
        self.catalog = CATALOGS.get(language, {})

    def __call__(self, message: str, **values: Any) -> str:
        if values:
            shown = {
                k: localize(v, self.language, catalog=self.catalog) if isinstance(v, Message) else v
                for k, v in values.items()
            }
            return self.catalog.get(message, message).format(**shown)
        return localize(message, self.language, catalog=self.catalog)

    def stored(self, text: str | None, structure: Mapping[str, Any] | None) -> str:
        return localize(text, self.language, structure, catalog=self.catalog)


def pick_language(cookie: str | None, accept_language: str | None) -> str:
    """The cookie wins; else the browser's first preference we have; else English."""
    if cookie in LANGUAGES:
        return cookie
    return negotiate(accept_language)


def translator(language: str) -> Translator:
    return Translator(language)
