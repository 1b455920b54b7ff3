"""The ground floor: seeds, the device, progress in words and result files, which every
other part of flowerbed may use and which use none of them (only ``flowerbed.settings``)."""
