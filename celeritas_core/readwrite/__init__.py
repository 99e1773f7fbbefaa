"""Reading and writing: the documented file formats, their limits, units and safe writes."""
