"""The console's message catalog: English is the key, Simplified Chinese the translation.

A string missing from a catalog falls back to English, so a new page never
shows a blank. Messages from services (errors) stay in English: they are also
what the API and the CLI print.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
    "Total": "总数",
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
    "optional; a name is made up if empty": "可选；留空则自动生成",
    "Create": "创建",
    "Fix the problem below and try again.": "请修正以下问题后重试。",
    "count must be a whole number from 0 to 16": "数量必须是 0 到 16 的整数",
    "disk must be a whole number of GB": "磁盘大小必须是整数 GB",
    "ID": "ID",
    "Page {page} of {pages}": "第 {page} / {pages} 页",
    "{n} instances": "共 {n} 个实例",
    "Not found": "未找到",
    "Forbidden": "无权访问",
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
    "deleted": "已删除",
    "failed": "失败",
    "healthy": "正常",
    "draining": "排空中",
    "unhealthy": "故障",
    "repairing": "维修中",
    # billing, SSH keys, images (read-only until their issues add forms)
    "Balance": "余额",
    "Available": "可用",
    "Spending per hour": "每小时消费",
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
    "Index": "序号",
    "State": "状态",
    "Tenant": "租户",
    "Instance": "实例",
    "NUMA": "NUMA",
    "Create user": "创建用户",
    "Admin": "管理员",
    "yes": "是",
    "optional: lets the user log in to this console": "可选：设置后用户可登录控制台",
    "User {name} created. Their API token (shown once):": (
        "已创建用户 {name}。其 API 令牌（仅显示一次）："
    ),
}

CATALOGS: dict[str, dict[str, str]] = {"en": {}, "zh-CN": ZH_CN}

Translator = Callable[..., str]


def pick_language(cookie: str | None, accept_language: str | None) -> str:
    """The cookie wins; else the browser's first preference we have; else English."""
    if cookie in LANGUAGES:
        return cookie
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("zh"):
            return "zh-CN"
        if tag.startswith("en"):
            return "en"
    return DEFAULT_LANGUAGE


def translator(language: str) -> Translator:
    catalog = CATALOGS.get(language, {})

    def translate(message: str, **values: Any) -> str:
        text = catalog.get(message, message)
        return text.format(**values) if values else text

    return translate
