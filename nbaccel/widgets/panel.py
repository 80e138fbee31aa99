"""ConfigPanel: a form over the config file, with Save, Load, Show code and Launch."""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import traitlets

from ..config import (
    ConfigError,
    ConfigFile,
    config_location,
    load_config_file,
    save_config_file,
    write_location,
)
from ..launch.parent.notebook import notebook_launcher
from .codegen import show_code
from .dashboard import LaunchDashboard
from .form import PanelValues, launch_options, validate
from .hardware import Hardware
from .sections import CONTROLS, DEEPSPEED_NOTE, FIELDS, SECTIONS, make_control, row_states

__all__ = ["ConfigPanel"]


class ConfigPanel(widgets.VBox):
    """A form over the nbaccel / Accelerate config file; display it in a notebook cell.

    Invalid combinations are shown next to their field as they are made (:attr:`errors`),
    never raised. :attr:`config` is the :class:`~nbaccel.config.ConfigFile` that ``nbaccel
    launch`` and ``Accelerator()`` read once :meth:`save` wrote it.

    Args:
        function: when given, a Launch button runs it with ``notebook_launcher`` and a live
            dashboard.
        args: its positional arguments.
        kwargs: its keyword arguments.
        hardware: what the machine has (default: detected, CUDA stays uninitialised).
        path: the config file for Save and Load (default: the file the CLI uses).
    """

    device = traitlets.Unicode("cpu")
    num_processes = traitlets.Int(1)
    mixed_precision = traitlets.Unicode("no")
    start_method = traitlets.Unicode("auto")
    gradient_accumulation_steps = traitlets.Int(1)
    max_restarts = traitlets.Int(0)
    display_ranks = traitlets.Unicode("0")
    num_machines = traitlets.Int(1)
    machine_rank = traitlets.Int(0)
    main_process_ip = traitlets.Unicode("")
    main_process_port = traitlets.Int(0)
    hosts = traitlets.Unicode(
        "", help="machines started from here: 'node1, node2', 'slurm' or 'ray' (Machines: nodes)"
    )
    hosts_python = traitlets.Unicode("")
    hosts_cwd = traitlets.Unicode("")
    use_fsdp = traitlets.Bool(False)
    fsdp_version = traitlets.Int(2)
    fsdp_sharding_strategy = traitlets.Unicode("FULL_SHARD")
    fsdp_reshard_after_forward = traitlets.Bool(True)
    fsdp_auto_wrap_policy = traitlets.Unicode("TRANSFORMER_BASED_WRAP")
    fsdp_transformer_layer_cls_to_wrap = traitlets.Unicode("")
    fsdp_min_num_params = traitlets.Int(100_000_000)
    fsdp_offload_params = traitlets.Bool(False)
    fsdp_state_dict_type = traitlets.Unicode("SHARDED_STATE_DICT")
    fsdp_activation_checkpointing = traitlets.Bool(False)
    use_deepspeed = traitlets.Bool(False)
    deepspeed_zero_stage = traitlets.Int(2)
    deepspeed_offload_optimizer_device = traitlets.Unicode("none")
    deepspeed_offload_optimizer_nvme_path = traitlets.Unicode("")
    deepspeed_offload_param_device = traitlets.Unicode("none")
    deepspeed_offload_param_nvme_path = traitlets.Unicode("")
    deepspeed_config_file = traitlets.Unicode("", help="a DeepSpeed JSON config; '': none")
    deepspeed_zero3_save_16bit_model = traitlets.Bool(False)
    errors = traitlets.Dict(help="field name -> what is wrong with it (empty: valid)")
    code = traitlets.Unicode("", help='the last "Show code" output')

    def __init__(
        self,
        function: Callable[..., Any] | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        hardware: Hardware | None = None,
        path: str | Path | None = None,
    ) -> None:
        self.hardware = hardware or Hardware.detect()
        self.function, self.args, self.kwargs = function, tuple(args), dict(kwargs or {})
        self.results: list[Any] | None = None
        self.error: BaseException | None = None
        self.dashboard: LaunchDashboard | None = None
        self._thread: threading.Thread | None = None
        self._syncing = False
        self.controls = {
            name: make_control(name, label, self.hardware)
            for name, label in [
                ("device", "Hardware"),
                *(r for rows in SECTIONS.values() for r in rows),
            ]
        }
        self.messages = {name: widgets.HTML("") for name in FIELDS}
        self.path_text = widgets.Text(
            value=str(path or write_location()),
            description="Config file",
            layout={"width": "560px"},
            style={"description_width": "150px"},
        )
        self.status_text = widgets.HTML("")
        self.code_view = widgets.HTML("")
        self.buttons = {n: widgets.Button(description=n) for n in ("Save", "Load", "Show code")}
        self.buttons["Save"].on_click(lambda _b: self._try(self.save))
        self.buttons["Load"].on_click(lambda _b: self._try(self.load))
        self.buttons["Show code"].on_click(lambda _b: self.show_code())
        if function is not None:
            self.buttons["Launch"] = widgets.Button(description="Launch", button_style="success")
            self.buttons["Launch"].on_click(lambda _b: self.launch())
        self._base_children = tuple(self._layout())
        super().__init__(children=self._base_children)
        for name, control in self.controls.items():
            control.value = getattr(self, name)
            control.observe(lambda change, name=name: self._from_control(name, change), "value")
        self.values = PanelValues(
            device="gpu" if self.hardware.gpus else "cpu",
            num_processes=max(1, min(2, self.hardware.max_processes("cpu"))),
        )

    # -- values --------------------------------------------------------------------------------
    @property
    def values(self) -> PanelValues:
        """Every field, as plain values."""
        return PanelValues(**{name: getattr(self, name) for name in FIELDS})

    @values.setter
    def values(self, new: PanelValues) -> None:
        self._precision_options(new.device, new.mixed_precision)
        with self.hold_trait_notifications():
            for name in FIELDS:
                setattr(self, name, getattr(new, name))
        self._update()

    @property
    def sharding(self) -> str:
        """The Sharding choice: ``none``, ``fsdp`` or ``deepspeed`` (sets ``use_fsdp`` and
        ``use_deepspeed``)."""
        return self.values.sharding

    @sharding.setter
    def sharding(self, choice: str) -> None:
        with self.hold_trait_notifications():
            self.use_fsdp, self.use_deepspeed = choice == "fsdp", choice == "deepspeed"

    @property
    def config(self) -> ConfigFile:
        """The config file the panel stands for (raises ``ConfigError`` while it is invalid)."""
        if self.errors:
            problems = "; ".join(f"{k}: {v}" for k, v in self.errors.items())
            raise ConfigError(f"the panel's settings are not valid: {problems}")
        return self.values.to_config()

    @property
    def launch_options(self) -> dict[str, Any]:
        """``notebook_launcher`` keyword arguments for the panel's settings."""
        return launch_options(self.values)

    @traitlets.observe(*FIELDS)
    def _field_changed(self, change: dict[str, Any]) -> None:
        name, value = change["name"], change["new"]
        if name == "device":
            self._precision_options(value, self.mixed_precision)
        control = self.controls.get(name)
        if control is None:  # use_fsdp, use_deepspeed: the Sharding choice shows them
            self._update()
            return
        if isinstance(control, widgets.widget_selection._Selection):
            options = list(control.options)
            values = [o[1] if isinstance(o, tuple) else o for o in options]
            if value not in values:  # an unsupported value is shown, with its message
                extra = (str(value).upper(), value) if name == "device" else value
                self._set_options(control, [*options, extra], value)
        if control.value != value:
            control.value = value
        self._update()

    def _from_control(self, name: str, change: dict[str, Any]) -> None:
        if not self._syncing:
            setattr(self, name, change["new"])

    def _set_options(self, control: Any, options: list[Any], value: Any) -> None:
        """Change a drop-down's options without its interim values reaching the panel."""
        self._syncing = True
        try:
            control.options = options
            control.value = value
        finally:
            self._syncing = False

    def _precision_options(self, device: str, current: str) -> None:
        allowed = list(self.hardware.precisions(device))
        control = self.controls["mixed_precision"]
        options = allowed + ([current] if current not in allowed else [])
        if list(control.options) != options:
            self._set_options(control, options, current)

    def _update(self) -> None:
        values = self.values
        self.errors = validate(values, self.hardware)
        for name, label in self.messages.items():
            text = self.errors.get(name, "")
            label.value = (
                f"<span style='color:#c62828'>&#9888; {html.escape(text)}</span>" if text else ""
            )
        for name, (shown, enabled) in row_states(values).items():
            self.rows[name].layout.display = None if shown else "none"
            self.controls[name].disabled = not enabled
        for title, chosen in (("FSDP", values.use_fsdp), ("DeepSpeed", values.use_deepspeed)):
            self.titles[title].layout.display = None if chosen else "none"
        choice = self.controls["sharding"]
        if choice.value != values.sharding:
            self._set_options(choice, list(choice.options), values.sharding)
        if "Launch" in self.buttons:
            busy = self._thread is not None and self._thread.is_alive()
            self.buttons["Launch"].disabled = bool(self.errors) or busy

    # -- layout --------------------------------------------------------------------------------
    def _layout(self) -> list[widgets.Widget]:
        shown_with = {"sharding": ("use_fsdp", "use_deepspeed")}  # the messages beside a control
        self.rows = {
            name: widgets.HBox(
                [self.controls[name], *(self.messages[m] for m in shown_with.get(name, (name,)))]
            )
            for name in CONTROLS
        }
        note = f"<br><i>{html.escape(DEEPSPEED_NOTE)}</i>"
        self.titles = {
            title: widgets.HTML(f"<b>{title}</b>{note if title == 'DeepSpeed' else ''}")
            for title in SECTIONS
        }
        parts: list[widgets.Widget] = [
            widgets.HTML("<h3 style='margin:4px 0'>nbaccel config</h3>"),
            widgets.HTML(f"<b>Hardware found</b>: {html.escape(self.hardware.description)}"),
            self.rows["device"],
        ]
        for title, rows in SECTIONS.items():
            parts.append(self.titles[title])
            parts += [self.rows[name] for name, _ in rows]
        parts += [self.path_text, widgets.HBox(list(self.buttons.values())), self.status_text]
        parts.append(self.code_view)
        return parts

    # -- actions -------------------------------------------------------------------------------
    def _try(self, action: Callable[[], Any]) -> None:
        try:
            action()
        except (ConfigError, ValueError, OSError) as exc:
            self._status(str(exc), error=True)

    def _status(self, text: str, error: bool = False) -> None:
        colour = "#c62828" if error else "#2e7d32"
        self.status_text.value = f"<span style='color:{colour}'>{html.escape(text)}</span>"

    def save(self, path: str | Path | None = None) -> Path:
        """Write :attr:`config` to ``path`` (default: the file the CLI writes) and return it.

        Raises:
            ConfigError: the settings are not valid (the messages say why).
        """
        target = Path(path) if path is not None else Path(self.path_text.value or write_location())
        written = save_config_file(self.config, target)
        self._status(f"Saved {written}")
        return written

    def load(self, path: str | Path | None = None) -> ConfigFile:
        """Read ``path`` (default: the file in force for the CLI) into the panel.

        Raises:
            ConfigError: the file is missing or invalid.
        """
        if path is None and self.path_text.value:
            path = self.path_text.value
        if path is None:
            path, _ = config_location()
        if path is None:
            raise ConfigError("no config file to load: save one first, or give a path")
        loaded = load_config_file(path, report=None)
        self.values = PanelValues.from_config(loaded.config, self.hardware)
        self._status(f"Loaded {loaded.path}")
        return loaded.config

    def show_code(self) -> str:
        """The ``notebook_launcher(...)`` / ``Accelerator(...)`` code for these settings."""
        name = getattr(self.function, "__name__", "train")
        name = name if name.isidentifier() else "train"
        self.code = show_code(self.values, function_name=name)
        self.code_view.value = f"<pre>{html.escape(self.code)}</pre>"
        return self.code

    def launch(self, block: bool = False) -> LaunchDashboard:
        """Run the function on the panel's settings with a live dashboard under the panel.

        The launch runs in a background thread, so the kernel stays free for the Stop
        button; :meth:`wait` returns the results (or raises the launch's error).
        """
        if self.function is None:
            raise ValueError("ConfigPanel(function=...) was not given a function to launch")
        if self.errors:
            self._status("fix the settings marked above first", error=True)
            raise ValueError(f"invalid settings: {self.errors}")

        board = LaunchDashboard()
        self.dashboard, self.results, self.error = board, None, None
        self.set_trait("children", (*self._base_children, board))
        options = dict(self.launch_options, dashboard=board, kwargs=self.kwargs)
        options.setdefault("hosts", False)  # the panel's settings, whatever the file in force
        function, args = self.function, self.args

        def run() -> None:
            try:
                self.results = notebook_launcher(function, args, **options)
            except BaseException as exc:  # shown by the dashboard; kept for wait()
                self.error = exc
            finally:
                self._update()

        self._thread = threading.Thread(target=run, name="nbaccel-panel-launch", daemon=True)
        self._thread.start()
        self._update()
        if block:
            self.wait()
        return board

    def wait(self, timeout: float | None = None) -> list[Any] | None:
        """Wait for the launch started by :meth:`launch`; its results, or its error raised."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"the launch is still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self.results
