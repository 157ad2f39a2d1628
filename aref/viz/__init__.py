"""Pictures of schedules for `aref compare`: the steady state as a Gantt chart (`aref.viz.gantt`) and the
loop's dependence graph coloured by warp group (`aref.viz.graph`). matplotlib is imported only when a
picture is drawn (the Agg backend: no display needed)."""
